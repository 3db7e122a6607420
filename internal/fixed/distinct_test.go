package fixed

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/lookup"
)

// named returns an unlinked entry bound to addr, port 53 and device
// dev, with the tie order seq.
func named(t *testing.T, addr string, dev int32, seq uint64) *lookup.Entry {
	e := entry(t, addr, 53, 0, 0)
	e.Device, e.Seq = dev, seq
	return e
}

// query returns the datagram from src to dst that arrived on ifindex.
func query(t *testing.T, src, dst string, ifindex int) *lookup.Query {
	t.Helper()
	var q lookup.Query
	require.True(t, q.Init(netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), ifindex))
	return &q
}

// TestScanDistinctStop: in a slot whose summary says its keys are
// distinct, the walk stops at the destination's entry. The test links a
// trap behind it without the summary's knowledge: a twin that would win
// the tie if the walk went on.
func TestScanDistinctStop(t *testing.T) {
	h2, err := hash2.New(256, 7)
	require.NoError(t, err)
	q := query(t, "192.0.2.1:1000", "127.0.0.1:53", 1)
	a := named(t, "127.0.0.1", 1, 1)
	trap := named(t, "127.0.0.1", 1, 2) // same score, more recent
	i := h2.IndexOf(a)
	require.NotEqual(t, h2.Index(h2.WildHash(), 53), i, "pick another seed")
	h2.Push(i, a)
	sum := h2.Summary(i)
	require.True(t, sum.Distinct())
	a.N2.Next.Store(&trap.N2)

	b := lookup.Best{}
	scanDistinct(&b, h2.At(i).First(), q, h2, i, sum)
	assert.Same(t, &a.Face, b.E, "the walk went past the destination's entry")
	b = lookup.Best{}
	scanSecondary(&b, h2.At(i).First(), q)
	assert.Same(t, &trap.Face, b.E, "the trap must win a full walk, or this test proves nothing")
}

// TestScanDistinctStale: a walk whose summary was read before a twin came
// does not stop at the first entry of the destination's key, whether the
// twin is still there or has left again while the walk stood on it: the
// unchanged entry behind, which beats it, wins.
func TestScanDistinctStale(t *testing.T) {
	q := query(t, "192.0.2.1:1000", "127.0.0.1:53", 1)
	for _, tc := range []struct {
		name  string
		leave bool // the twin leaves after the walk reached it
	}{
		{"twin linked after the summary was read", false},
		{"twin linked and unlinked after the summary was read", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h2, err := hash2.New(256, 7)
			require.NoError(t, err)
			a := named(t, "127.0.0.1", 1, 1)    // bound to the datagram's device: 22
			twin := named(t, "127.0.0.1", 0, 2) // no device: 18
			i := h2.IndexOf(a)
			h2.Push(i, a)
			sum := h2.Summary(i)
			require.True(t, sum.Distinct())
			h2.Push(i, twin)
			n := h2.At(i).First()
			require.Same(t, &twin.N2, n)
			if tc.leave {
				h2.Remove(i, twin)
				require.True(t, h2.Summary(i).Distinct(), "the twin count is even again: only the count's change tells")
			}
			b := lookup.Best{}
			scanDistinct(&b, n, q, h2, i, sum)
			assert.Same(t, &a.Face, b.E)
		})
	}
}

// TestTwoPhaseWildcardSlot: when a destination's exact slot is the
// wildcard slot, the walk that stops early does not apply: the wildcard
// entries there must be offered.
func TestTwoPhaseWildcardSlot(t *testing.T) {
	h2, err := hash2.New(256, 7)
	require.NoError(t, err)
	w := h2.Index(h2.WildHash(), 53)
	var dst string
	for k := 1; dst == ""; k++ {
		a := fmt.Sprintf("10.%d.%d.%d", k>>16&255, k>>8&255, k&255)
		if h2.Index(h2.AddrHash(lookup.Addr16Of(netip.MustParseAddr(a))), 53) == w {
			dst = a
		}
	}
	wild := named(t, "0.0.0.0", 0, 1)
	h2.Push(w, wild)
	require.True(t, h2.Summary(w).Distinct())
	tabs := tables{h2: h2}
	r := tabs.twoPhase(query(t, "192.0.2.1:1000", dst+":53", 1))
	require.NotNil(t, r, "datagram to %s, whose exact slot is the wildcard's", dst)
	assert.Same(t, wild.Ref.Sock, r.Sock)
}
