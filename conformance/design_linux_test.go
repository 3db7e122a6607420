//go:build linux

package conformance

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestKernelDesignTable runs the kernel table of DESIGN.md ("Semantics")
// row by row, as fixed scenarios: the kernel must give the outcome the row
// states, and the table must agree with the kernel, as in the random test.
func TestKernelDesignTable(t *testing.T) {
	e, err := setupEnv(os.Getenv("UDPDEMUX_CONFORMANCE_LOOPBACK") != "")
	if err != nil {
		t.Skipf("kernel conformance test skipped: cannot set up UDP sockets on loopback: %v", err)
	}
	defer e.close()
	port := e.ports[0]
	has6 := len(e.dst6) > 0

	type step struct {
		o    op
		want string // the kernel's outcome DESIGN.md states; "" for none
	}
	bind := func(id int, spec, want string) step {
		f := strings.Fields(spec)
		b := bindSpec{addr: netip.MustParseAddr(f[0]), port: port, owner: e.uid}
		for _, w := range f[1:] {
			switch w {
			case "reuseaddr":
				b.reuseAddr = true
			case "reuseport":
				b.reusePort = true
			case "v6only":
				b.v6only = true
			case "dev=lo":
				b.dev = e.devs[0].ifindex
			default:
				panic("bad spec " + spec)
			}
		}
		return step{op{kind: opBind, id: id, bind: b}, want}
	}
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
	connect := func(id int, ip string, nth int, want string) step {
		return step{op{kind: opConnect, id: id, peer: peerOf(ip, nth)}, want}
	}
	send := func(ip string, nth int, dst, want string) step {
		return step{op{kind: opSend, peer: peerOf(ip, nth), dst: netip.AddrPortFrom(netip.MustParseAddr(dst), port)}, want}
	}
	then := func(pre []step, last step) []step { return append(append([]step(nil), pre...), last) }

	dual := []step{bind(0, "::", "ok"), connect(0, "::1", 0, "local ::1")}
	mapped := []step{bind(0, "::", "ok"), connect(0, "127.0.0.2", 0, "local ::ffff:127.0.0.1")}
	wild := []step{bind(0, "0.0.0.0", "ok"), connect(0, "127.0.0.1", 0, "local 127.0.0.1")}
	var chain []step
	for i := 1; i <= 11; i++ {
		chain = append(chain, bind(i-1, "127.0.0."+strconv.Itoa(i), "ok"))
	}

	rows := []struct {
		row   string
		needs bool // IPv6 on loopback
		steps []step
	}{
		{"1", false, []step{bind(0, "127.0.0.1 reuseaddr", "ok"), bind(1, "127.0.0.1 reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s1")}},
		{"2", false, []step{bind(0, "127.0.0.1 reuseaddr", "ok"), bind(1, "0.0.0.0 reuseaddr", "ok"), connect(1, "127.0.0.1", 0, "local 127.0.0.1"),
			send("127.0.0.1", 0, "127.0.0.1", "s1"), send("127.0.0.1", 1, "127.0.0.1", "s0")}},
		{"3", false, []step{bind(0, "127.0.0.1 reuseaddr", "ok"), connect(0, "127.0.0.1", 0, "local 127.0.0.1"), bind(1, "127.0.0.1 reuseaddr", "ok"),
			send("127.0.0.1", 0, "127.0.0.1", "s0"), send("127.0.0.1", 1, "127.0.0.1", "s1")}},
		{"4 (v4 first)", true, []step{bind(0, "0.0.0.0 reuseaddr", "ok"), bind(1, ":: reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s0")}},
		{"4 (v6 first)", true, []step{bind(0, ":: reuseaddr", "ok"), bind(1, "0.0.0.0 reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s1")}},
		{"5 (device first)", false, []step{bind(0, "0.0.0.0 reuseaddr dev=lo", "ok"), bind(1, "0.0.0.0 reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s0")}},
		{"5 (device last)", false, []step{bind(0, "0.0.0.0 reuseaddr", "ok"), bind(1, "0.0.0.0 reuseaddr dev=lo", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s1")}},
		{"6 (device first)", false, []step{bind(0, "0.0.0.0 reuseaddr dev=lo", "ok"), bind(1, "127.0.0.1 reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s1")}},
		{"6 (device last)", false, []step{bind(0, "127.0.0.1 reuseaddr", "ok"), bind(1, "0.0.0.0 reuseaddr dev=lo", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s0")}},
		{"7", true, []step{bind(0, "0.0.0.0 reuseaddr", "ok"), bind(1, "::ffff:127.0.0.1 reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s1")}},
		{"7 (mapped first)", true, []step{bind(0, "::ffff:127.0.0.1 reuseaddr", "ok"), bind(1, "0.0.0.0 reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s0")}},
		{"8 (v4 first)", true, []step{bind(0, "127.0.0.1 reuseaddr", "ok"), bind(1, "::ffff:127.0.0.1 reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s0")}},
		{"8 (mapped first)", true, []step{bind(0, "::ffff:127.0.0.1 reuseaddr", "ok"), bind(1, "127.0.0.1 reuseaddr", "ok"), send("127.0.0.1", 0, "127.0.0.1", "s1")}},
		{"9", true, []step{bind(0, ":: v6only", "ok"), send("127.0.0.1", 0, "127.0.0.1", "none")}},
		{"10", false, []step{bind(0, "127.0.0.1", "ok"), connect(0, "127.0.0.1", 0, "local 127.0.0.1"), send("127.0.0.1", 1, "127.0.0.1", "none")}},
		// Row 11 (4 ReusePort sockets spread 20 flows over all 4) is about
		// the kernel's hash, not the table's answer; the random test checks
		// that every datagram to a group lands in that group.
		{"12", true, []step{bind(0, "::", "ok"), bind(1, "0.0.0.0", "EADDRINUSE")}},
		{"13", true, []step{bind(0, ":: v6only", "ok"), bind(1, "0.0.0.0", "ok")}},
		{"14", true, []step{bind(0, "::", "ok"), bind(1, "127.0.0.1", "EADDRINUSE")}},
		{"15", true, []step{bind(0, "127.0.0.1", "ok"), bind(1, "::", "EADDRINUSE")}},
		{"16 (same)", true, []step{bind(0, "127.0.0.1", "ok"), bind(1, "::ffff:127.0.0.1", "EADDRINUSE")}},
		{"16 (other)", true, []step{bind(0, "127.0.0.1", "ok"), bind(1, "::ffff:127.0.0.2", "ok")}},
		{"17", true, []step{bind(0, "::1", "ok"), bind(1, "::", "EADDRINUSE")}},
		{"18 (same)", false, []step{bind(0, "127.0.0.1 reuseport", "ok"), bind(1, "127.0.0.1 reuseport", "ok")}},
		{"18 (wildcard)", false, []step{bind(0, "127.0.0.1 reuseport", "ok"), bind(1, "0.0.0.0 reuseport", "ok")}},
		{"19", false, []step{bind(0, "127.0.0.1 reuseaddr", "ok"), bind(1, "127.0.0.1", "EADDRINUSE")}},
		{"20 (no device)", false, []step{bind(0, "0.0.0.0 dev=lo", "ok"), bind(1, "0.0.0.0", "EADDRINUSE")}},
		{"20 (device lo)", false, []step{bind(0, "0.0.0.0 dev=lo", "ok"), bind(1, "0.0.0.0 dev=lo", "EADDRINUSE")}},
		{"21", false, then(chain, bind(11, "0.0.0.0", "EADDRINUSE"))},
		{"22", true, []step{bind(0, "::ffff:127.0.0.1 v6only", "EINVAL")}},
		{"23", true, []step{bind(0, "::1", "ok"), bind(1, "0.0.0.0", "ok")}},
		{"24 (0.0.0.0)", true, then(dual, bind(1, "0.0.0.0", "EADDRINUSE"))},
		{"24 (127.0.0.1)", true, then(dual, bind(1, "127.0.0.1", "ok"))},
		{"24 (::)", true, then(dual, bind(1, "::", "EADDRINUSE"))},
		{"25 (127.0.0.1)", true, then(mapped, bind(1, "127.0.0.1", "EADDRINUSE"))},
		{"25 (127.0.0.2)", true, then(mapped, bind(1, "127.0.0.2", "ok"))},
		{"25 (::1)", true, then(mapped, bind(1, "::1", "ok"))},
		{"26 (127.0.0.1)", false, then(wild, bind(1, "127.0.0.1", "EADDRINUSE"))},
		{"26 (127.0.0.2)", false, then(wild, bind(1, "127.0.0.2", "ok"))},
	}
	for _, row := range rows {
		if row.needs && !has6 {
			t.Logf("row %s skipped: no IPv6 on loopback", row.row)
			continue
		}
		ops := make([]op, len(row.steps))
		for i, s := range row.steps {
			ops[i] = s.o
		}
		var res result
		e.th.do(func() { res, err = replay(e, ops, featA|featB|featC, true) })
		if err != nil {
			t.Fatal(err)
		}
		trace := "\n  " + strings.Join(res.trace, "\n  ")
		if res.fail != nil {
			t.Errorf("DESIGN.md row %s: %s%s", row.row, res.fail.msg, trace)
		}
		for i, s := range row.steps {
			if s.want == "" || i >= len(res.outcomes) {
				continue
			}
			if got := res.outcomes[i]; got != s.want {
				t.Errorf("DESIGN.md row %s, op %d: the kernel says %s, DESIGN.md says %s%s", row.row, i+1, got, s.want, trace)
			}
		}
	}
	t.Logf("%d rows", len(rows))
}
