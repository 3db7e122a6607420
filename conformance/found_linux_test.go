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
	any6, lo6, lo4b := netip.IPv6Unspecified(), netip.IPv6Loopback(), netip.MustParseAddr("127.0.0.2")
	send := func(from string, to netip.Addr) op {
		return op{kind: opSend, peer: peer(from), dst: netip.AddrPortFrom(to, port)}
	}
	tests := []struct {
		name string
		ops  []op
		// want is the kernel's outcome of each op ("" for any). The
		// scenario shows its case only on a kernel whose probes found
		// every behaviour of when (and one of whenAny, if set). There,
		// needs are the outcomes, by op index, without which it shows
		// nothing, and byChance outcomes of which one shows it if the
		// kernel's flow hash picks it (logged when none does).
		want          []string
		when, whenAny feature
		needs         map[int]string
		byChance      map[int]string
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
			send("10.99.0.2:40001", lo4b),
		},
		want:    []string{"ok", "", "ok", "", "ok", "", ""},
		when:    model.Diff2 | model.Diff3 | model.Diff6,
		whenAny: model.Diff1 | model.Diff1Peer,
		needs:   map[int]string{5: "ok", 6: "s0"},
	}, {
		// Seed 3389358022950992414, scenario 2169. s0's connect takes
		// it out of its group with s1 and marks that group; s2's bind
		// starts a group with s0. The disconnects unbind s0's and s1's
		// device, but neither leaves its group. s1 comes first in the
		// chain: its group, marked, gives a pick, which stays the
		// answer unless a later socket outscores both it and s1. The
		// pick s3, on lo, keeps the datagram; the pick s1, on no
		// device, loses it to s2's group. The model followed s1's
		// score and never said s3. Each datagram's flow picks one of
		// two, hence four.
		name: "a marked group's pick that scores higher",
		ops: []op{
			{kind: opBind, id: 0, bind: bindSpec{addr: lo6, port: port, reusePort: true, owner: e.uid, dev: lo}},
			{kind: opBind, id: 1, bind: bindSpec{addr: lo6, port: port, reusePort: true, owner: e.uid, dev: lo}},
			{kind: opConnect, id: 0, peer: peer("[::1]:40001")},
			{kind: opBind, id: 2, bind: bindSpec{addr: lo6, port: port, reuseAddr: true, reusePort: true, owner: e.uid, dev: lo}},
			{kind: opDisconnect, id: 0},
			{kind: opBind, id: 3, bind: bindSpec{addr: lo6, port: port, reuseAddr: true, reusePort: true, owner: e.uid, dev: lo}},
			{kind: opDisconnect, id: 1},
			send("[fd00::2]:40001", lo6),
			send("[fd01::2]:40001", lo6),
			send("[fd03::2]:40001", lo6),
			send("[fd04::2]:40001", lo6),
		},
		want:     []string{"ok", "ok", "", "ok", "", "ok", ""},
		when:     model.Diff2 | model.Diff6,
		byChance: map[int]string{7: "s3", 8: "s3", 9: "s3", 10: "s3"},
	}, {
		// Seed 1697397745204898409, scenario 2308. s0's connect marks
		// its group {s0, s2} and leaves it; s3 joins {s2, s3}. Its
		// disconnect unbinds its device: s3, first in the chain, now
		// scores below s2 and s1 (another owner's group), yet its
		// group's pick stays the answer even when it is s3 itself,
		// since they score no more than the pick or s3. A model that
		// had later sockets beat the pick's score alone said s1 there.
		name: "a marked group's pick that scores lower",
		ops: []op{
			{kind: opBind, id: 0, bind: bindSpec{addr: lo4b, port: port, reuseAddr: true, reusePort: true, owner: e.uid, dev: lo}},
			{kind: opBind, id: 1, bind: bindSpec{addr: lo4b, port: port, reuseAddr: true, reusePort: true, owner: 1000, dev: lo}},
			{kind: opBind, id: 2, bind: bindSpec{addr: lo4b, port: port, reuseAddr: true, reusePort: true, owner: e.uid, dev: lo}},
			{kind: opConnect, id: 0, peer: peer("127.0.0.1:40001")},
			{kind: opBind, id: 3, bind: bindSpec{addr: lo4b, port: port, reuseAddr: true, reusePort: true, owner: e.uid, dev: lo}},
			{kind: opDisconnect, id: 3},
			send("127.0.0.1:40002", lo4b),
			send("127.0.0.2:40001", lo4b),
			send("127.0.0.6:40001", lo4b),
			send("10.99.0.2:40001", lo4b),
		},
		want:     []string{"ok", "ok", "ok", "", "ok", ""},
		when:     model.Diff2 | model.Diff6,
		byChance: map[int]string{6: "s3", 7: "s3", 8: "s3", 9: "s3"},
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
			shown := false
			for i, w := range tt.byChance {
				shown = shown || res.outcomes[i] == w
			}
			switch {
			case len(tt.byChance) == 0 || shown:
			case shows:
				t.Logf("no flow's pick showed the scenario this time (kernel %v)%s", e.kern, trace)
			default:
				t.Logf("this kernel (%v) lacks %v: the scenario shows nothing here%s", e.kern, tt.when&^e.kern, trace)
			}
		})
	}
}
