// Package lockorder is the lock hierarchy of udpdemux's writes, in both
// storages, and the only way the other packages take those locks: each is
// a Mutex, which only a Guard's methods lock, or hand out to be locked at
// once.
//
// The order, from the first lock a write may take to the last:
//
//   - bind(0)'s random source (bind.Rand's lock, which a table has only
//     with Config.Rand) is taken holding nothing, and nothing is taken
//     while it is held: the source is the caller's code.
//   - The port's lock: the fixed storage's primary slot, the growing
//     storage's port record; at most one.
//   - Fixed: secondary slots, in strictly ascending index, released
//     together with the primary by Unlock.
//   - Growing: the resize lock of one index (TryLockResize, which never
//     waits), taken with no line lock held; then index line locks, one at
//     a time (a resize takes each old line's in turn). Each is released
//     on its own, the port's last.
//
// Every write operation takes its locks through one Guard. The fixed
// storage's writes always carry one; the growing storage's carry the one
// Begin returns, nil while checking is off, and a nil Guard's methods only
// lock and unlock, so that the check costs those writes a branch. Lookups
// take no lock, but for the growing storage's last attempt, which takes
// the port's lock as a write does.
//
// With checking on (SetChecking, for tests), a Guard verifies each
// acquisition and release against the order and panics with a description
// of the violation, before it waits for the lock: so a test that breaks
// the order fails at once, and never deadlocks first. What a Guard sees is
// one write, from its first lock (the port's, or bind(0)'s first draw) to
// its last release; a write begun inside another, with a Guard of its
// own, is beyond it.
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

// Mutex is a lock of the hierarchy. Its zero value is unlocked. It can be
// taken only through a Guard.
type Mutex struct{ mu sync.Mutex }

var checking atomic.Bool

// SetChecking turns the order checks on or off and returns the old setting.
func SetChecking(on bool) bool { return checking.Swap(on) }

const maxHeld = 4

// Guard holds the locks of one write operation. The zero value holds none.
// A Guard must not be copied after its first acquisition.
type Guard struct {
	// The fixed storage's slot locks, released together.
	held    [maxHeld]*Mutex
	n       int
	primary bool
	lastSec int // index of the last secondary slot locked, -1 if none

	// The locks released one by one, by Kind: the growing storage's, and
	// the random source's, which both storages' bind(0) takes.
	kinds [Source + 1]bool
	// failed is set by the first violation: the write's deferred
	// releases, which run as its panic unwinds, check nothing more, so
	// that the panic a test sees is the first violation's.
	failed bool
}

// guards recycles the growing storage's Guards, so that its writes
// allocate none with checking on either (package demux's allocation tests
// run with it on).
var guards = sync.Pool{New: func() any { return new(Guard) }}

// Begin returns the Guard of a write of the growing storage: nil while
// checking is off, when the write's locks need no bookkeeping. Release it
// with End once the write holds nothing.
func Begin() *Guard {
	if !checking.Load() {
		return nil
	}
	return guards.Get().(*Guard)
}

// End checks that g's write holds nothing and recycles g. g may be nil.
func (g *Guard) End() {
	if g != nil {
		g.end()
	}
}

//go:noinline
func (g *Guard) end() {
	if h := g.holding(); h != "" && g.checks() {
		g.fail("a write ends holding " + h)
	}
	*g = Guard{}
	guards.Put(g)
}

// holding names a lock that g's write holds, "" if none.
func (g *Guard) holding() string {
	for _, k := range [...]Kind{Source, Line, Resize, Port} {
		if g.kinds[k] {
			return kindNames[k]
		}
	}
	if g.n > 0 {
		return "a slot lock"
	}
	return ""
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
		if h := g.holding(); h != "" {
			panic(fmt.Sprintf("lockorder: primary slot %d while holding %s", idx, h))
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
	if ib < ia {
		a, ia, b, ib = b, ib, a, ia
	}
	g.Secondary(a, ia)
	if ib != ia {
		g.Secondary(b, ib)
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
	g.failed = false // the fixed storage's Guards are used again
}

// The growing storage's locks, each taken and released on its own, and
// the random source's. A nil Guard (checking off) keeps no books: its
// methods only hand out the lock.
//
// The caller takes and releases these locks itself: Locking and Unlocking
// check and record the acquisition or release and return the lock, which
// the caller locks or unlocks at once (o.Locking(lockorder.Line, m).Lock()).
// A method that locked would cost every write a call per lock with
// checking off, since sync.Mutex's Lock alone fills the compiler's
// inlining budget; these inline, and cost a branch. A deferred release
// defers both calls, in a function: defer evaluates o.Unlocking(k, m) at
// once, which would record the release too early.

// Kind is the kind of a lock that a Guard records one by one.
type Kind uint8

const (
	// Port is a port record lock of the growing storage: first, holding
	// nothing.
	Port Kind = iota
	// Resize is an index's resize lock, taken with TryLockResize: inside
	// the port record lock, holding no line lock; released after every
	// line lock.
	Resize
	// Line is an index line lock: inside the port record lock, holding no
	// other line lock.
	Line
	// Source is bind(0)'s random source's lock: a leaf, taken holding
	// nothing. Both storages take it (the fixed storage's Guard is never
	// nil).
	Source
)

// Locking checks that the write may take m, a lock of kind k, now, records
// it and returns the lock to take. Resize locks are taken with
// TryLockResize instead.
func (g *Guard) Locking(k Kind, m *Mutex) *sync.Mutex {
	if g != nil {
		g.taking(k)
	}
	return &m.mu
}

// Unlocking checks that the write holds a lock of kind k, and none that
// must be released before it, records the release of m and returns the
// lock to release.
func (g *Guard) Unlocking(k Kind, m *Mutex) *sync.Mutex {
	if g != nil {
		g.releasing(k)
	}
	return &m.mu
}

// TryLockResize takes m, an index's resize lock, if it is free, and
// reports whether it took it. Release it with Unlocking(Resize, m).
func (g *Guard) TryLockResize(m *Mutex) bool {
	if g != nil {
		g.check(Resize)
	}
	if !m.mu.TryLock() {
		return false
	}
	if g != nil {
		g.kinds[Resize] = true
	}
	return true
}

var kindNames = [...]string{"a port record lock", "a resize lock", "an index line lock", "the random source's lock"}

// taking checks that the write may take a lock of kind k now, and records
// it. Not inlined, so that the methods that call it inline.
//
//go:noinline
func (g *Guard) taking(k Kind) {
	g.check(k)
	g.kinds[k] = true
}

// check panics, with checking on, unless the write may take a lock of
// kind k now.
func (g *Guard) check(k Kind) {
	if !g.checks() {
		return
	}
	what := kindNames[k]
	switch k {
	case Port, Source:
		if h := g.holding(); h != "" {
			g.fail(what + " while holding " + h)
		}
		return
	}
	switch {
	case g.kinds[Source]:
		g.fail(what + " while holding the random source's lock")
	case !g.kinds[Port]:
		g.fail(what + " without the port record lock")
	case g.kinds[Line]:
		g.fail(what + " while holding an index line lock")
	case k == Resize && g.kinds[Resize]:
		g.fail("a second resize lock while one is held")
	}
}

// checks reports whether g checks its write: with checking on, until the
// first violation.
func (g *Guard) checks() bool { return checking.Load() && !g.failed }

// fail reports a violation.
func (g *Guard) fail(msg string) {
	g.failed = true
	panic("lockorder: " + msg)
}

// releasing checks that the write holds a lock of kind k, and none that
// must be released before it (the port record lock goes last, a resize
// lock after every line lock), and records its release.
//
//go:noinline
func (g *Guard) releasing(k Kind) {
	held := &g.kinds[k]
	if g.checks() {
		if !*held {
			g.fail("releases " + kindNames[k] + " it does not hold")
		}
		*held = false
		if h := g.holding(); h != "" && (k == Port || k == Resize && g.kinds[Line]) {
			g.fail("releases " + kindNames[k] + " while holding " + h)
		}
	}
	*held = false
}
