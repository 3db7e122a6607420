package grow

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// TestKeysTakePositions: the address index keeps the value of a key of
// one class in a position of the key's cache line, which a lookup reads
// with the line, and spares a bind and a close the allocation of an
// overflow node: only a key with more classes, or one whose line is full,
// goes to the line's chain. A Map that put every new key in the chain
// (mutation index-positions-unused) answers every lookup right, but
// costs each lookup of the key a further cache miss, and each bind a
// node (demux's TestBindCloseAllocs counts that through the public API).
//
// A bind and a close on a busy port then allocate nothing on average: a
// key whose line is full (about one bind in ten here) takes a node, and
// testing.AllocsPerRun rounds the average down. The port is one-phase, so
// that it keeps no bind-check summary, whose cells a bind may add to. The
// lock order is left unchecked: a checked write's Guard is allocated.
func TestKeysTakePositions(t *testing.T) {
	const port = 443
	defer lockorder.SetChecking(lockorder.SetChecking(false))
	g := New([4]uint64{1, 2, 3, 4}, AlwaysScan, 5, &bind.Occupancy{}, bind.NewRand(nil))
	pr := g.LockPort(port)
	defer g.Unlock(pr)
	entry := func(a, b byte) *lookup.Entry {
		v4 := uint32(10)<<24 | uint32(a)<<8 | uint32(b)
		sk := new(lookup.Socket)
		e := &lookup.Entry{Face: lookup.Face{Port: port, Flags: lookup.HasV4 | lookup.ReuseAddr, V4: v4, V6: lookup.Map4(v4),
			Ref: lookup.Ref{Sock: sk}}}
		sk.Cur.Store(e)
		return e
	}

	// The first key: in a position of its line, with no chain.
	first := entry(0, 0)
	g.Link(pr, first)
	k := addrKeyOf(first)
	p := g.addrs.Probe(g.addrHash(k))
	var at *lookup.Entry
	for b := p.Tagged(); b != 0; b &= b - 1 {
		if e := p.At(b); e != nil && addrIs(e, k) {
			at = e
		}
	}
	assert.Same(t, first, at, "the key's value in a position of its line")
	assert.Nil(t, p.l.over.Load(), "the line's chain")

	// A busy port, then a bind and a close of a new address at a time.
	for i := range 199 {
		g.Link(pr, entry(1, byte(i)))
	}
	const runs = 1000
	es := make([]*lookup.Entry, runs+1) // AllocsPerRun runs once more first
	for i := range es {
		es[i] = entry(byte(2+i>>8), byte(i))
	}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		e := es[next]
		next++
		g.Link(pr, e)
		g.Unlink(pr, e)
	})
	require.Equal(t, runs+1, next)
	assert.Zero(t, allocs, "allocations of a bind and a close on a port of 200 sockets")
	requireVerified(t, g)
}
