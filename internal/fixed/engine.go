package fixed

import (
	"sync"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// Chooser is a bind(0) algorithm: (*bind.Ephemeral).Index, Bitmap or
// Linear.
type Chooser func(x *bind.Ephemeral, n *lookup.Entry, g *lockorder.Guard) bool

// Config is what an Engine writes to and decides with.
type Config struct {
	H1 *hash1.Table // the primary table, which lookups read too
	H2 *hash2.Table // the secondary table, which lookups read too
	// Rule is how explicit-port conflict checks choose between the tables.
	Rule bind.Rule
	// Choose picks bind(0)'s port; nil means (*bind.Ephemeral).Index.
	Choose Chooser
	// Occ is the occupancy index, which bind(0) reads (package demux
	// keeps it), with the ephemeral range it counts.
	Occ  *bind.Occupancy
	Rand *bind.Rand // bind(0)'s random source
	// Threshold is the hybrid rule's, and Seed the flow hash's, for
	// lookups.
	Threshold int
	Seed      uint64
	Strategy  Strategy
}

// Engine is the fixed tables, read and written. Its methods that take a
// *Held expect it to hold its port's primary slot, as LockPort and
// Ephemeral return it.
type Engine struct {
	tables   // what lookups read: h1, h2, threshold, seed
	strategy Strategy
	check    bind.Checker
	eph      bind.Ephemeral
	choose   Chooser
	// helds recycles the handles, so that a write allocates none: a
	// handle outlives the call that locks, and so cannot live on the
	// caller's stack.
	helds sync.Pool
}

// Held is a write's handle: the locks it holds, its port's primary slot
// first. It is valid from LockPort (or Ephemeral) to Unlock.
type Held struct {
	g    lockorder.Guard
	h1   *hash1.Table
	port uint16
}

// New returns an engine over c's tables.
func New(c Config) *Engine {
	x := &Engine{tables: tables{h1: c.H1, h2: c.H2, threshold: c.Threshold, seed: c.Seed},
		choose: c.Choose, strategy: c.Strategy}
	x.check = bind.Checker{H1: c.H1, H2: c.H2, Rule: c.Rule}
	x.eph = bind.Ephemeral{Checker: x.check, Occ: c.Occ, Rand: c.Rand}
	if x.choose == nil {
		x.choose = (*bind.Ephemeral).Index
	}
	x.helds.New = func() any { return new(Held) }
	return x
}

// held returns a handle that holds nothing.
func (x *Engine) held() *Held {
	h := x.helds.Get().(*Held)
	h.h1, h.port = x.h1, 0
	return h
}

// LockPort locks port's primary slot and returns the handle. Release it
// with Unlock.
func (x *Engine) LockPort(port uint16) *Held {
	h := x.held()
	x.h1.LockPort(&h.g, port)
	h.port = port
	return h
}

// Unlock releases every lock h holds. h must not be used after.
func (x *Engine) Unlock(h *Held) {
	h.g.Unlock()
	x.helds.Put(h)
}

// InUse reports whether a socket on h's port conflicts with n, and whether
// the check searched the secondary table rather than the port's primary
// chain.
func (x *Engine) InUse(h *Held, n *lookup.Entry) (inUse, secondary bool) {
	return x.check.InUse(n)
}

// Ephemeral chooses a port for n with the configured algorithm and returns
// the handle holding its primary slot, with n.Port set, or nil if no port
// of the range is free for n.
func (x *Engine) Ephemeral(n *lookup.Entry) *Held {
	h := x.held()
	if !x.choose(&x.eph, n, &h.g) {
		x.helds.Put(h)
		return nil
	}
	h.port = n.Port
	return h
}

// Entries appends the entries on h's port to buf, newest first. The
// primary chain also holds the entries of the other ports that share the
// slot; they are left out.
func (h *Held) Entries(buf []*lookup.Entry) []*lookup.Entry {
	for n := h.h1.Slot(h.port).Chain.First(); n != nil; n = n.Next.Load() {
		if e := lookup.OfPrimary(n); e.Port == h.port {
			buf = append(buf, e)
		}
	}
	return buf
}
