package fixed

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

func TestMain(m *testing.M) {
	lockorder.SetChecking(true)
	m.Run()
}

// newEngine returns an engine of 256 slots whose bind(0) draws from
// low–high with choose.
func newEngine(t *testing.T, low, high uint16, choose Chooser) *Engine {
	t.Helper()
	h1, err := hash1.New(256)
	require.NoError(t, err)
	h2, err := hash2.New(256, 1)
	require.NoError(t, err)
	r, err := bind.NewRange(low, high, nil)
	require.NoError(t, err)
	return New(Config{H1: h1, H2: h2, Rule: bind.HybridRule(10), Choose: choose,
		Occ: &bind.Occupancy{Range: r}, Rand: bind.NewRand(rand.NewPCG(1, 2))})
}

// entry returns a new socket's first entry, unlinked.
func entry(t *testing.T, addr string, port uint16, flags uint8, owner uint32) *lookup.Entry {
	t.Helper()
	l, err := ipv6.Bind(netip.MustParseAddr(addr), false, 0, nil)
	require.NoError(t, err)
	e := &lookup.Entry{Face: lookup.Face{Port: port, Flags: flags | l.Flags, V4: l.V4, V6: l.V6, Ref: lookup.Ref{Sock: new(lookup.Socket)}}, Owner: owner}
	return e
}

// link binds e as demux does: check, publish, count, unlock.
func link(t *testing.T, x *Engine, e *lookup.Entry) {
	t.Helper()
	h := x.LockPort(e.Port)
	defer x.Unlock(h)
	inUse, _ := x.InUse(h, e)
	require.False(t, inUse)
	e.Sock().Cur.Store(e)
	x.Link(h, e)
	x.eph.Occ.Add(e)
}

// verify fails t if x's invariants do not hold, and returns its entries.
func verify(t *testing.T, x *Engine) map[*lookup.Entry]bool {
	t.Helper()
	var errs []string
	seen := x.Verify(func(f string, a ...any) { errs = append(errs, f) })
	require.Empty(t, errs)
	return seen
}

func TestEntriesOfSharedSlot(t *testing.T) {
	x := newEngine(t, 0, 0, nil)
	a := entry(t, "10.0.0.1", 53, 0, 0)
	b := entry(t, "10.0.0.1", 53+256, 0, 0) // same primary slot, another port
	c := entry(t, "10.0.0.2", 53, 0, 0)
	for _, e := range []*lookup.Entry{a, b, c} {
		link(t, x, e)
	}
	verify(t, x)
	h := x.LockPort(53)
	got := h.Entries(nil)
	x.Unlock(h)
	assert.Equal(t, []*lookup.Entry{c, a}, got, "port 53's entries, newest first, without port 309's")
}

func TestEphemeral(t *testing.T) {
	for _, tc := range []struct {
		name   string
		choose Chooser
	}{
		{"index", (*bind.Ephemeral).Index},
		{"bitmap", (*bind.Ephemeral).Bitmap},
		{"linear", (*bind.Ephemeral).Linear},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One port in range, held by an SO_REUSEADDR socket.
			x := newEngine(t, 40000, 40000, tc.choose)
			held := entry(t, "0.0.0.0", 40000, lookup.ReuseAddr, 0)
			link(t, x, held)

			// A sharer gets the port, and the handle lists its entries.
			e := entry(t, "0.0.0.0", 0, lookup.ReuseAddr, 0)
			h := x.Ephemeral(e)
			require.NotNil(t, h)
			assert.Equal(t, uint16(40000), e.Port)
			assert.Equal(t, []*lookup.Entry{held}, h.Entries(nil))
			e.Sock().Cur.Store(e)
			x.Link(h, e)
			x.eph.Occ.Add(e)
			x.Unlock(h)
			verify(t, x)

			// A socket that conflicts gets none, and nothing stays locked.
			require.Nil(t, x.Ephemeral(entry(t, "0.0.0.0", 0, 0, 0)))
			done := make(chan struct{})
			go func() {
				x.Unlock(x.LockPort(40000))
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("port still locked after a failed Ephemeral")
			}
		})
	}
}

func TestGroupOf(t *testing.T) {
	x := newEngine(t, 0, 0, nil)
	a := entry(t, "10.0.0.1", 53, lookup.ReusePort, 7)
	link(t, x, a)
	for _, tc := range []struct {
		name  string
		e     *lookup.Entry
		joins bool
	}{
		{"same key and owner", entry(t, "10.0.0.1", 53, lookup.ReusePort, 7), true},
		{"other owner", entry(t, "10.0.0.1", 53, lookup.ReusePort, 8), false},
		{"other address", entry(t, "10.0.0.2", 53, lookup.ReusePort, 7), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := x.LockPort(53)
			g := x.GroupOf(h, tc.e)
			x.Unlock(h)
			require.NotNil(t, g)
			assert.Equal(t, tc.joins, g == a.Group)
		})
	}
}

// TestReplaceMove checks the move protocol: an entry whose key changes is
// in its new secondary slot, not its old one, and both slots' sequence
// counts moved (by one write section each); one whose key stays is
// replaced in place, and no count moves.
func TestReplaceMove(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		moves          bool
	}{
		{"wildcard to address", "0.0.0.0", "10.0.0.1", true},
		{"same address", "10.0.0.1", "10.0.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newEngine(t, 0, 0, nil)
			old := entry(t, tc.from, 53, 0, 0)
			link(t, x, old)
			e := entry(t, tc.to, 53, lookup.Connected, 0)
			e.Ref = old.Ref
			oi, ni := x.h2.IndexOf(old), x.h2.IndexOf(e)
			require.Equal(t, tc.moves, oi != ni, "the addresses' slots (seed-dependent)")
			os, ns := x.h2.At(oi).Seq.Read(), x.h2.At(ni).Seq.Read()

			h := x.LockPort(53)
			e.Sock().Cur.Store(e)
			x.Replace(h, old, e)
			x.Unlock(h)

			seen := verify(t, x)
			assert.Equal(t, map[*lookup.Entry]bool{e: true}, seen)
			assert.Equal(t, x.h2.At(ni).Chain.First(), &e.N2)
			want := uint32(0)
			if tc.moves {
				want = 2
			}
			assert.Equal(t, want, x.h2.At(oi).Seq.Read()-os, "old slot's count")
			assert.Equal(t, want, x.h2.At(ni).Seq.Read()-ns, "new slot's count")
		})
	}
}

func TestUnlink(t *testing.T) {
	x := newEngine(t, 0, 0, nil)
	var es []*lookup.Entry
	for _, a := range []string{"10.0.0.1", "10.0.0.1", "0.0.0.0"} {
		e := entry(t, a, 53, lookup.ReusePort, 0)
		link(t, x, e)
		es = append(es, e)
	}
	require.Equal(t, es[0].Group, es[1].Group)
	h := x.LockPort(53)
	x.Unlink(h, es[0])
	x.Unlock(h)
	es[0].Sock().Closed.Store(true)
	assert.Equal(t, map[*lookup.Entry]bool{es[1]: true, es[2]: true}, verify(t, x))
	assert.Equal(t, []*lookup.Entry{es[1]}, es[1].Group.Members())
}

// TestVerifySeesMoveInProgress: a secondary slot whose sequence count a
// writer left odd is reported, not waited on.
func TestVerifySeesMoveInProgress(t *testing.T) {
	x := newEngine(t, 1000, 1999, nil)
	var errs []string
	verify := func() {
		errs = nil
		x.Verify(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
	}
	verify()
	require.Empty(t, errs)
	x.h2.At(7).Seq.Begin()
	verify()
	require.Equal(t, []string{"secondary slot 7: move in progress"}, errs)
	x.h2.At(7).Seq.End()
	verify()
	require.Empty(t, errs)
}
