//go:build linux

package conformance

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/internal/model"
)

// TestKernelFound replays, as fixed scenarios, failures that the random
// test found and that were the test's own fault, not the table's: each
// must pass, and the kernel must still give the outcomes that made it
// fail, or the scenario no longer shows what it was kept for.
func TestKernelFound(t *testing.T) {
	e := mustSetup(t)
	defer e.close()
	if !e.root || len(e.devs) < 2 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the found scenarios need root and a veth pair in CI (%s)", strings.Join(e.notes, "; "))
		}
		t.Skipf("found scenarios skipped: they need a network namespace with a veth pair (%s)", strings.Join(e.notes, "; "))
	}
	port := e.ports[0]
	lo, veth0 := e.devs[0].ifindex, e.devs[1].ifindex
	peer := func(s string) int {
		ap := netip.MustParseAddrPort(s)
		for i, p := range e.peers {
			if p.addr == ap {
				return i
			}
		}
		t.Fatalf("no peer %s", s)
		return -1
	}
	any6 := netip.IPv6Unspecified()
	tests := []struct {
		name string
		ops  []op
		// want is the kernel's outcome of each op ("" for any). On a
		// kernel whose probes found every behaviour of when (one of
		// whenAny too, if set), needs are the outcomes, by op index,
		// without which the scenario shows nothing.
		want          []string
		when, whenAny feature
		needs         map[int]string
	}{{
		// Seed 5483201565091271197, scenario 1840. s0 leaves its
		// group at connect and stays out of any after the disconnect.
		// s3 is a would-be peer of s0, so Linux's bind check stops
		// there and never meets s1 (another owner), which udpdemux
		// finds: deliberate difference 1. The runner closes s3 on the
		// kernel, but s3's bind gave s0 a group of its own, which
		// outlives s3: Linux then hands the datagram to that group,
		// the first it meets in the chain, though s2's device scores
		// higher (deliberate difference 2). The model of the kernel
		// missed the group and said s2.
		name: "a refused bind leaves a group behind",
		ops: []op{
			{kind: opBind, id: 0, bind: bindSpec{addr: any6, port: port, reusePort: true, owner: 1000}},
			{kind: opConnect, id: 0, peer: peer("127.0.0.2:40001")},
			{kind: opBind, id: 1, bind: bindSpec{addr: netip.MustParseAddr("fd01::1"), port: port, reusePort: true, owner: e.uid, dev: veth0}},
			{kind: opDisconnect, id: 0},
			{kind: opBind, id: 2, bind: bindSpec{addr: any6, port: port, reusePort: true, owner: 1000, dev: lo}},
			{kind: opBind, id: 3, bind: bindSpec{addr: any6, port: port, reusePort: true, owner: 1000}},
			{kind: opSend, peer: peer("10.99.0.2:40001"), dst: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)},
		},
		want:    []string{"ok", "", "ok", "", "ok", "", ""},
		when:    model.Diff2 | model.Diff3 | model.Diff6,
		whenAny: model.Diff1 | model.Diff1Peer,
		needs:   map[int]string{5: "ok", 6: "s0"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res result
			var err error
			e.th.Do(func() { res, err = replay(e, tt.ops, deliberate, true) })
			require.NoError(t, err)
			trace := "\n  " + strings.Join(res.trace, "\n  ")
			require.Nil(t, res.fail, "%s", trace)
			require.Len(t, res.outcomes, len(tt.ops), trace)
			for i, w := range tt.want {
				if w != "" {
					assert.Equal(t, w, res.outcomes[i], "op %d%s", i, trace)
				}
			}
			shows := e.kern&tt.when == tt.when && (tt.whenAny == 0 || e.kern&tt.whenAny != 0)
			for i, w := range tt.needs {
				switch {
				case shows:
					assert.Equal(t, w, res.outcomes[i], "op %d: the kernel has %v%s", i, tt.when|tt.whenAny&e.kern, trace)
				case res.outcomes[i] != w:
					t.Logf("this kernel (%v) gives %q at op %d, not %q: the scenario shows nothing here%s", e.kern, res.outcomes[i], i, w, trace)
				}
			}
		})
	}
}
