package hash2

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

// entryAt returns an unlinked IPv4 entry bound to a on port.
func entryAt(a string, port uint16) *lookup.Entry {
	k := lookup.Addr16Of(netip.MustParseAddr(a))
	return &lookup.Entry{Face: lookup.Face{Port: port, Flags: lookup.HasV4, V4: k.V4(), V6: k}}
}

// TestMask runs writes on one slot of a table and checks, after each,
// the mask's two promises: it holds the bit of every entry in the
// chain (Summary.MayHold is true for each entry's key and for the wildcard when a
// wildcard entry is there), and it is exactly the chain's once the write
// is done (so a key whose bit no entry sets is passed over).
func TestMask(t *testing.T) {
	tab, err := New(256, 7)
	require.NoError(t, err)
	// Addresses whose keys share one slot on port 53, the wildcard's, the
	// second and third on bits other than the first's; then a probe whose
	// bit none of them, nor the wildcard, sets.
	const port = 53
	wild := tab.WildHash()
	i := tab.Index(wild, port)
	addr := func(n int) (string, uint32) {
		a := fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
		return a, tab.AddrHash(lookup.Addr16Of(netip.MustParseAddr(a)))
	}
	var same []string
	taken := bit(wild)
	n := 1
	for ; len(same) < 3; n++ {
		a, h := addr(n)
		if tab.Index(h, port) == i && (len(same) == 0 || bit(h) != bit(tab.AddrHash(entryAt(same[0], port).Key()))) {
			same = append(same, a)
			taken |= bit(h)
		}
	}
	var probe string
	for ; probe == ""; n++ {
		if a, h := addr(n); bit(h)&taken == 0 {
			probe = a
		}
	}
	key := func(a string) uint32 { return tab.AddrHash(lookup.Addr16Of(netip.MustParseAddr(a))) }
	e0, e1, e2 := entryAt(same[0], port), entryAt(same[1], port), entryAt(same[2], port)
	w := entryAt("0.0.0.0", port)
	e0c := entryAt(same[0], port) // e0 connected: a new state, same key
	e0c.Flags |= lookup.Connected
	type step struct {
		name string
		do   func()
		in   []*lookup.Entry // the chain after the step
	}
	steps := []step{
		{"push e0", func() { tab.Push(i, e0) }, []*lookup.Entry{e0}},
		{"push e1", func() { tab.Push(i, e1) }, []*lookup.Entry{e0, e1}},
		{"push wildcard", func() { tab.Push(i, w) }, []*lookup.Entry{e0, e1, w}},
		{"replace e0", func() { tab.Replace(i, e0, e0c) }, []*lookup.Entry{e0c, e1, w}},
		{"remove e1", func() { tab.Remove(i, e1) }, []*lookup.Entry{e0c, w}},
		{"push e2", func() { tab.Push(i, e2) }, []*lookup.Entry{e0c, w, e2}},
		{"remove wildcard", func() { tab.Remove(i, w) }, []*lookup.Entry{e0c, e2}},
		{"remove e0", func() { tab.Remove(i, e0c) }, []*lookup.Entry{e2}},
		{"remove e2", func() { tab.Remove(i, e2) }, nil},
	}
	for _, s := range steps {
		s.do()
		require.Equal(t, len(s.in), tab.At(i).Len(), s.name)
		var want uint32
		for _, e := range s.in {
			h := tab.AddrHash(e.Key())
			want |= bit(h)
			assert.True(t, tab.Summary(i).MayHold(h, h), "%s: %v", s.name, e.LocalAddr())
		}
		assert.Equal(t, want, uint32(tab.Summary(i)), s.name)
		tab.VerifySummary(i, func(f string, a ...any) { t.Errorf(s.name+": "+f, a...) })
		// A datagram to probe, whose bit no entry sets, passes over the
		// slot unless the wildcard entry is there.
		hasWild := false
		for _, e := range s.in {
			hasWild = hasWild || e == w
		}
		assert.Equal(t, hasWild, tab.Summary(i).MayHold(key(probe), wild), "%s: probe with the wildcard", s.name)
		assert.False(t, tab.Summary(i).MayHold(key(probe), key(probe)), "%s: probe", s.name)
	}
}

// sameSlot returns n IPv4 addresses whose keys on port share slot i of
// tab, and entries bound to them.
func sameSlot(tab *Table, i int, port uint16, n int) []*lookup.Entry {
	var es []*lookup.Entry
	for k := 1; len(es) < n; k++ {
		a := fmt.Sprintf("10.%d.%d.%d", k>>16&255, k>>8&255, k&255)
		if e := entryAt(a, port); tab.IndexOf(e) == i {
			es = append(es, e)
		}
	}
	return es
}

// TestMaskLongChain: a removal from a chain that keeps more than exactMax
// entries leaves the mask as it was, so that a close costs no walk of a
// long chain; the mask keeps every remaining entry's bit throughout, and
// the removal that brings the chain down to exactMax makes it exact.
func TestMaskLongChain(t *testing.T) {
	tab, err := New(256, 7)
	require.NoError(t, err)
	const port = 53
	i := tab.Index(tab.WildHash(), port)
	es := sameSlot(tab, i, port, exactMax+4)
	for _, e := range es {
		tab.Push(i, e)
	}
	for k, e := range es {
		before := uint32(tab.Summary(i))
		tab.Remove(i, e)
		left := es[k+1:]
		var want uint32
		for _, r := range left {
			want |= bit(tab.AddrHash(r.Key()))
		}
		got := uint32(tab.Summary(i))
		assert.Equal(t, want, got&want, "after %d removals: a remaining entry's bit is missing", k+1)
		if len(left) > exactMax {
			assert.Equal(t, before, got, "after %d removals, %d left: the mask was recomputed", k+1, len(left))
		} else {
			assert.Equal(t, want, got, "after %d removals, %d left: the mask is not exact", k+1, len(left))
		}
		tab.VerifySummary(i, func(f string, a ...any) { t.Errorf(f, a...) })
	}
}

// TestVerifyMask checks that VerifySummary reports a mask that lacks a bit
// of its chain, and one that keeps a stale bit while the chain holds at
// most exactMax entries, but not a stale bit of a longer chain.
func TestVerifyMask(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries int
		mask    func(chain uint32) uint32
		bad     bool
	}{
		{"exact", 1, func(c uint32) uint32 { return c }, false},
		{"lacks the entry's bit", 1, func(uint32) uint32 { return 0 }, true},
		{"keeps a stale bit", 1, func(uint32) uint32 { return ^uint32(0) }, true},
		{"keeps a stale bit, short chain", exactMax, func(uint32) uint32 { return ^uint32(0) }, true},
		{"keeps a stale bit, long chain", exactMax + 1, func(uint32) uint32 { return ^uint32(0) }, false},
		{"lacks a bit, long chain", exactMax + 1, func(c uint32) uint32 { return c &^ (c & -c) }, true},
	} {
		tab, err := New(256, 7)
		require.NoError(t, err)
		i := tab.Index(tab.WildHash(), 53)
		for _, e := range sameSlot(tab, i, 53, tc.entries) {
			tab.Push(i, e)
		}
		tab.sums[i].Store(uint64(tc.mask(tab.mask(i))))
		var got []string
		tab.VerifySummary(i, func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
		assert.Equal(t, tc.bad, len(got) > 0, "%s: %v", tc.name, got)
	}
}

// TestTwins runs writes on one slot and checks the twin count after each:
// odd exactly while the chain holds two entries of one key and port, or
// since it did while the chain is longer than exactMax, or after a push
// onto a chain longer than twinScanMax; and VerifySummary content with it.
func TestTwins(t *testing.T) {
	tab, err := New(256, 7)
	require.NoError(t, err)
	const port = 53
	i := tab.Index(tab.WildHash(), port)
	es := sameSlot(tab, i, port, twinScanMax+exactMax)
	a, b := es[0], es[1]
	twin := entryAt(a.LocalAddr().String(), port)
	aConn := entryAt(a.LocalAddr().String(), port) // a's connected state
	aConn.Flags |= lookup.Connected
	// a's address on another port that shares the slot: not a twin.
	var otherPort *lookup.Entry
	for p := uint16(1); otherPort == nil; p++ {
		if e := entryAt(a.LocalAddr().String(), p); p != port && tab.IndexOf(e) == i {
			otherPort = e
		}
	}
	type step struct {
		name     string
		do       func()
		distinct bool
	}
	steps := []step{
		{"push a", func() { tab.Push(i, a) }, true},
		{"push b", func() { tab.Push(i, b) }, true},
		{"push a's address on another port", func() { tab.Push(i, otherPort) }, true},
		{"replace a by its connected state", func() { tab.Replace(i, a, aConn) }, true},
		{"push a twin of a", func() { tab.Push(i, twin) }, false},
		{"remove b", func() { tab.Remove(i, b) }, false},
		{"remove the twin", func() { tab.Remove(i, twin) }, true},
		{"replace a's connected state by a", func() { tab.Replace(i, aConn, a) }, true},
		{"push the twin again", func() { tab.Push(i, twin) }, false},
		{"replace the twin by b", func() { tab.Replace(i, twin, b) }, true},
	}
	// A chain longer than exactMax keeps an odd count after its twins
	// leave, until it is short again.
	steps = append(steps, step{"push the twin, then up to exactMax+2 entries", func() {
		tab.Push(i, twin)
		for _, e := range es[2 : exactMax+1] {
			tab.Push(i, e)
		}
	}, false})
	steps = append(steps, step{"remove the twin from the long chain", func() { tab.Remove(i, twin) }, false})
	steps = append(steps, step{"remove down to exactMax", func() {
		for _, e := range es[2:4] {
			tab.Remove(i, e)
		}
	}, true})
	// A new state of an entry is no twin of the state it replaces, also
	// where the chain is too long for a recount.
	long := es[exactMax+1]
	longConn := entryAt(long.LocalAddr().String(), port)
	longConn.Flags |= lookup.Connected
	steps = append(steps, step{"push one more, past exactMax", func() { tab.Push(i, long) }, true})
	steps = append(steps, step{"replace it by its connected state", func() { tab.Replace(i, long, longConn) }, true})
	// A push onto a chain longer than twinScanMax is not compared.
	steps = append(steps, step{"push distinct keys past twinScanMax", func() {
		for _, e := range es[exactMax+2:] {
			tab.Push(i, e)
		}
	}, false})
	for _, s := range steps {
		s.do()
		assert.Equal(t, s.distinct, tab.Summary(i).Distinct(), "%s (%d entries)", s.name, tab.At(i).Len())
		tab.VerifySummary(i, func(f string, a ...any) { t.Errorf(s.name+": "+f, a...) })
	}
}

// TestVerifyTwins checks that VerifySummary reports an even twin count
// over a chain with twins, and an odd one over a short chain without, but
// not an odd one over a long chain without.
func TestVerifyTwins(t *testing.T) {
	for _, tc := range []struct {
		name     string
		entries  int
		twin     bool
		distinct bool
		bad      bool
	}{
		{"even, no twins", 2, false, true, false},
		{"odd, twins", 2, true, false, false},
		{"even, twins", 2, true, true, true},
		{"even, twins, long chain", exactMax + 1, true, true, true},
		{"odd, no twins, short chain", exactMax, false, false, true},
		{"odd, no twins, long chain", exactMax + 1, false, false, false},
	} {
		tab, err := New(256, 7)
		require.NoError(t, err)
		i := tab.Index(tab.WildHash(), 53)
		es := sameSlot(tab, i, 53, tc.entries)
		if tc.twin {
			es[len(es)-1] = entryAt(es[0].LocalAddr().String(), 53)
		}
		for _, e := range es {
			tab.slots[i].PushFront(&e.N2) // bypassing the summary
		}
		s := uint64(tab.mask(i))
		if !tc.distinct {
			s |= twinOne
		}
		tab.sums[i].Store(s)
		var got []string
		tab.VerifySummary(i, func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
		assert.Equal(t, tc.bad, len(got) > 0, "%s: %v", tc.name, got)
	}
}
