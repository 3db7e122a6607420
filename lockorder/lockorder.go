// Package lockorder is the lock hierarchy of the fixed storage's slots and
// the only way the other packages take those locks.
//
// The order is: at most one primary (port) slot, then secondary (address,
// port) slots in strictly ascending index. Every write operation takes its
// locks through one Guard, which releases them all at once. Lookups take no
// lock at all. (The growing storage's order, a port's record lock, then
// one index line lock at a time, is package grow's and is not checked
// here: a check needs the locks a goroutine holds, which its writes carry
// no Guard to record.)
//
// With checking on (SetChecking, for tests), a Guard verifies each
// acquisition against the hierarchy and panics with a description of the
// violation: a secondary before the primary, a second primary, a secondary
// at or below one already held, or the same lock twice.
//
// This is an implementation package of udpdemux, exported only so that the
// module's other packages can use it: its API may change in any release,
// with no compatibility promise. Programs use package demux.
package lockorder

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Mutex is a slot lock. Its zero value is unlocked. It can be taken only
// through a Guard.
type Mutex struct{ mu sync.Mutex }

var checking atomic.Bool

// SetChecking turns the order checks on or off and returns the old setting.
func SetChecking(on bool) bool { return checking.Swap(on) }

const maxHeld = 4

// Guard holds the locks of one write operation. The zero value holds none.
// A Guard must not be copied after its first acquisition.
type Guard struct {
	held    [maxHeld]*Mutex
	n       int
	primary bool
	lastSec int // index of the last secondary slot locked, -1 if none
}

// Primary locks the primary slot lock m (slot index idx).
func (g *Guard) Primary(m *Mutex, idx int) {
	if checking.Load() {
		if g.primary {
			panic(fmt.Sprintf("lockorder: second primary slot %d while one is held", idx))
		}
		if g.n > 0 {
			panic(fmt.Sprintf("lockorder: primary slot %d after a secondary slot", idx))
		}
	}
	g.push(m)
	g.primary = true
	g.lastSec = -1
}

// Secondary locks the secondary slot lock m (slot index idx). The primary
// slot must be held and idx must exceed every secondary index held.
func (g *Guard) Secondary(m *Mutex, idx int) {
	if checking.Load() {
		if !g.primary {
			panic(fmt.Sprintf("lockorder: secondary slot %d without the primary slot", idx))
		}
		if idx <= g.lastSec {
			// This also catches the same slot twice.
			panic(fmt.Sprintf("lockorder: secondary slot %d after secondary slot %d", idx, g.lastSec))
		}
	}
	g.push(m)
	g.lastSec = idx
}

// Secondaries locks the secondary slots a and b (indexes ia, ib) in
// ascending order, once if they are the same slot.
func (g *Guard) Secondaries(a *Mutex, ia int, b *Mutex, ib int) {
	switch {
	case ia == ib:
		g.Secondary(a, ia)
	case ia < ib:
		g.Secondary(a, ia)
		g.Secondary(b, ib)
	default:
		g.Secondary(b, ib)
		g.Secondary(a, ia)
	}
}

func (g *Guard) push(m *Mutex) {
	if g.n == maxHeld {
		panic("lockorder: too many locks in one operation")
	}
	m.mu.Lock()
	g.held[g.n] = m
	g.n++
}

// Unlock releases every lock the guard holds, newest first, and resets it.
func (g *Guard) Unlock() {
	for i := g.n - 1; i >= 0; i-- {
		g.held[i].mu.Unlock()
		g.held[i] = nil
	}
	g.n = 0
	g.primary = false
	g.lastSec = -1
}
