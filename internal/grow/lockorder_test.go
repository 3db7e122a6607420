package grow

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// TestMain runs the package's tests with the lock order checked, so that
// every write of an engine in them fails its test if it takes a lock out
// of order. (Map's own tests pass no Guard, and are not checked.)
func TestMain(m *testing.M) {
	lockorder.SetChecking(true)
	os.Exit(m.Run())
}

// orderEngine is an engine whose bind(0) draws from a source with a lock
// (as with demux.Config.Rand), over the ports 40000-40007, with the
// writes of package demux's write path on it.
type orderEngine struct {
	t       *testing.T
	g       *Engine
	occ     *bind.Occupancy
	checked bool // whether checking is on: whether writes carry a Guard
}

func newOrderEngine(t *testing.T, checked bool) *orderEngine {
	r, err := bind.NewRange(40000, 40007, nil)
	require.NoError(t, err)
	occ := &bind.Occupancy{Range: r}
	return &orderEngine{t: t, occ: occ, checked: checked,
		g: New([4]uint64{1, 2, 3, 4}, 10, 5, occ, bind.NewRand(rand.NewPCG(6, 7)))}
}

// orderEntry returns a socket's first entry on 10.0.0.a, port p (0: bind(0)).
func orderEntry(a byte, p uint16, flags uint8) *lookup.Entry {
	sk := new(lookup.Socket)
	v4 := uint32(10<<24 | uint32(a))
	e := &lookup.Entry{Face: lookup.Face{Port: p, Flags: lookup.HasV4 | flags, V4: v4, V6: lookup.Map4(v4), Ref: lookup.Ref{Sock: sk}}}
	sk.Cur.Store(e)
	return e
}

// bind binds e to its port, or with port 0 to one bind(0) chooses.
func (o *orderEngine) bind(e *lookup.Entry) {
	var pr *Port
	if e.Port == 0 {
		pr = o.g.Ephemeral(e)
		require.NotNil(o.t, pr, "no port for bind(0)")
	} else {
		pr = o.g.LockPort(e.Port)
		inUse, _ := o.g.InUse(pr, e)
		require.False(o.t, inUse)
	}
	defer o.g.Unlock(pr)
	require.Equal(o.t, o.checked, pr.ord != nil, "a write carries a Guard exactly while checking is on")
	o.g.Link(pr, e)
	o.occ.Add(e)
}

// connect connects e's socket to 192.0.2.1:i and returns its new entry.
func (o *orderEngine) connect(e *lookup.Entry, i int) *lookup.Entry {
	pr := o.g.LockPort(e.Port)
	defer o.g.Unlock(pr)
	n := &lookup.Entry{Face: e.Face, Owner: e.Owner}
	n.Flags |= lookup.Connected | lookup.Hash4
	n.Remote, n.RemotePort = lookup.Map4(192<<24|2<<8|1), uint16(i)
	e.Sock().Cur.Store(n)
	o.g.Replace(pr, e, n)
	o.occ.Remove(e)
	o.occ.Add(n)
	return n
}

func (o *orderEngine) close(e *lookup.Entry) {
	pr := o.g.LockPort(e.Port)
	defer o.g.Unlock(pr)
	o.g.Unlink(pr, e)
	o.occ.Remove(e)
}

// TestWritesKeepLockOrder: every kind of write of the growing storage, with
// the lock order checked: binds and closes that grow and shrink the
// indexes, connects that move entries between them, and a bind(0) that
// draws from a locked source and declines ports under their locks. A
// write that took a lock out of order would panic in lockorder, before it
// waited for the lock.
func TestWritesKeepLockOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(o *orderEngine)
	}{
		{"indexes grow and shrink", func(o *orderEngine) {
			var es []*lookup.Entry
			for i := range 200 {
				e := orderEntry(byte(i), 5300, lookup.ReuseAddr)
				o.bind(e)
				es = append(es, e)
			}
			for _, e := range es {
				o.close(e)
			}
		}},
		{"connects move entries", func(o *orderEngine) {
			var es []*lookup.Entry
			for i := range 200 {
				e := orderEntry(1, 5300, lookup.ReuseAddr)
				o.bind(e)
				es = append(es, o.connect(e, 1000+i))
			}
			for _, e := range es {
				o.close(e)
			}
		}},
		{"bind(0) declines taken ports", func(o *orderEngine) {
			// Every port of the range holds a socket, and all but one
			// hold one on 10.0.0.2 without SO_REUSEADDR: the search
			// locks and declines ports until it finds the one.
			for p := uint16(40000); p < 40007; p++ {
				o.bind(orderEntry(2, p, 0))
			}
			o.bind(orderEntry(3, 40007, 0))
			for range 20 {
				e := orderEntry(2, 0, 0)
				o.bind(e)
				assert.Equal(o.t, uint16(40007), e.Port)
				o.close(e)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrderEngine(t, true)
			require.NotPanics(t, func() { tc.run(o) })
			requireVerified(t, o.g)
		})
	}
}

// TestUncheckedWritesCarryNoGuard: with checking off, a write's record
// carries no Guard, so that its locks cost a branch each.
func TestUncheckedWritesCarryNoGuard(t *testing.T) {
	defer lockorder.SetChecking(lockorder.SetChecking(false))
	o := newOrderEngine(t, false)
	e := orderEntry(1, 5300, 0)
	require.NotPanics(t, func() { o.bind(e) })
	o.close(o.connect(e, 1))
	requireVerified(t, o.g)
}
