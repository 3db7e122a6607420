//go:build linux

package conformance

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/udpdemux/udpdemux/internal/rows"
)

// TestKernelDesignTable runs the semantics table of DESIGN.md (the rows of
// package internal/rows, which the table's own tests run too) row by row,
// as fixed scenarios: the kernel must give the outcome the row states, and
// the table must agree with the kernel, as in the random test.
func TestKernelDesignTable(t *testing.T) {
	e := mustSetup(t)
	var err error
	defer e.close()
	port := e.ports[0]
	has6 := len(e.dst6) > 0

	peerOf := func(ip string, nth int) int {
		for i, p := range e.peers {
			if p.addr.Addr().String() == ip {
				if nth == 0 {
					return i
				}
				nth--
			}
		}
		panic("no peer " + ip)
	}
	peers := map[rows.Peer]int{
		rows.P:    peerOf("127.0.0.1", 0),
		rows.Q:    peerOf("127.0.0.1", 1),
		rows.P6:   peerOf("::1", 0),
		rows.Far4: peerOf("127.0.0.2", 0),
	}
	// kernelOps turns a row into ops, with the outcome each op must have
	// ("" for none).
	kernelOps := func(row rows.Row) (ops []op, want []string) {
		n := 0
		for _, st := range row.Steps {
			var o op
			switch st.Kind {
			case rows.Bind:
				b := bindSpec{addr: st.Bind.Addr, port: port, owner: e.uid,
					reuseAddr: st.Bind.ReuseAddr, reusePort: st.Bind.ReusePort, v6only: st.Bind.V6Only}
				if st.Bind.Device {
					b.dev = e.devs[0].ifindex
				}
				o = op{kind: opBind, id: n, bind: b}
				n++
			case rows.Connect:
				o = op{kind: opConnect, id: st.Sock, peer: peers[st.Peer]}
			case rows.Send:
				// A datagram to ::ffff:a.b.c.d is the IPv4 datagram
				// to a.b.c.d.
				o = op{kind: opSend, peer: peers[st.Peer], dst: netip.AddrPortFrom(st.Dst.Unmap(), port)}
			default:
				// Row 11 (4 ReusePort sockets spread 20 flows over all
				// 4) is about the kernel's hash, not the table's
				// answer; the random test checks that every datagram
				// to a group lands in that group.
				continue
			}
			ops, want = append(ops, o), append(want, st.Want)
		}
		return ops, want
	}
	count := 0
	for _, row := range rows.All {
		if row.Needs6() && !has6 {
			t.Logf("row %s skipped: no IPv6 on loopback", row.Label())
			continue
		}
		ops, want := kernelOps(row)
		count++
		var res result
		e.th.Do(func() { res, err = replay(e, ops, deliberate, true) })
		if err != nil {
			t.Fatal(err)
		}
		trace := "\n  " + strings.Join(res.trace, "\n  ")
		if res.fail != nil {
			t.Errorf("DESIGN.md row %s: %s%s", row.Label(), res.fail.msg, trace)
		}
		for i, w := range want {
			if w == "" || i >= len(res.outcomes) {
				continue
			}
			if got := res.outcomes[i]; got != w {
				t.Errorf("DESIGN.md row %s, op %d: the kernel says %s, the row says %s%s", row.Label(), i+1, got, w, trace)
			}
		}
	}
	t.Logf("%d rows and variants", count)
}
