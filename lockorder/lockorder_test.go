package lockorder

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOrder(t *testing.T) {
	old := SetChecking(true)
	defer SetChecking(old)
	var m [8]Mutex
	type step struct {
		primary bool
		idx     int
	}
	cases := []struct {
		name  string
		steps []step
		panic string // substring of the panic, "" for none
	}{
		{"primary alone", []step{{true, 0}}, ""},
		{"primary then ascending secondaries", []step{{true, 0}, {false, 1}, {false, 5}}, ""},
		{"secondary without primary", []step{{false, 1}}, "without the primary"},
		{"two primaries", []step{{true, 0}, {true, 1}}, "second primary"},
		{"descending secondaries", []step{{true, 0}, {false, 5}, {false, 1}}, "after secondary slot 5"},
		{"same secondary twice", []step{{true, 0}, {false, 3}, {false, 3}}, "after secondary slot 3"},
		{"primary after secondary", []step{{true, 0}, {false, 1}, {true, 2}}, "second primary"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var g Guard
			run := func() {
				defer g.Unlock()
				for _, s := range tc.steps {
					if s.primary {
						g.Primary(&m[s.idx], s.idx)
					} else {
						g.Secondary(&m[s.idx], s.idx)
					}
				}
			}
			if tc.panic == "" {
				require.NotPanics(t, run)
			} else {
				var got any
				func() {
					defer func() { got = recover() }()
					run()
				}()
				require.NotNil(t, got, "no panic")
				assert.Contains(t, got, tc.panic)
			}
			// Every lock must be free again, whatever happened.
			for i := range m {
				require.True(t, m[i].mu.TryLock(), "lock %d still held", i)
				m[i].mu.Unlock()
			}
		})
	}
}

func TestSecondariesOrdersAndDedups(t *testing.T) {
	old := SetChecking(true)
	defer SetChecking(old)
	var p, a, b Mutex
	for _, tc := range []struct{ ia, ib int }{{1, 2}, {2, 1}, {3, 3}} {
		var g Guard
		g.Primary(&p, 0)
		if tc.ia == tc.ib {
			require.NotPanics(t, func() { g.Secondaries(&a, tc.ia, &a, tc.ib) })
			assert.Equal(t, 2, g.n)
		} else {
			require.NotPanics(t, func() { g.Secondaries(&a, tc.ia, &b, tc.ib) })
			assert.Equal(t, 3, g.n)
		}
		g.Unlock()
		assert.Equal(t, 0, g.n)
	}
}

// TestUncheckedStillLocks: with checking off, a Guard still takes and
// releases its locks.
func TestUncheckedStillLocks(t *testing.T) {
	old := SetChecking(false)
	defer SetChecking(old)
	var p Mutex
	var g Guard
	g.Primary(&p, 0)
	assert.False(t, p.mu.TryLock())
	g.Unlock()
	assert.True(t, p.mu.TryLock())
}

// TestGrowingOrder: the order of the locks a Guard takes one by one, the
// growing storage's and the random source's.
func TestGrowingOrder(t *testing.T) {
	old := SetChecking(true)
	defer SetChecking(old)
	var port, port2, line, line2, resize, source, slot Mutex
	steps := map[string]func(g *Guard){
		"port":      func(g *Guard) { g.Locking(Port, &port).Lock() },
		"port2":     func(g *Guard) { g.Locking(Port, &port2).Lock() },
		"unport":    func(g *Guard) { g.Unlocking(Port, &port).Unlock() },
		"line":      func(g *Guard) { g.Locking(Line, &line).Lock() },
		"line2":     func(g *Guard) { g.Locking(Line, &line2).Lock() },
		"unline":    func(g *Guard) { g.Unlocking(Line, &line).Unlock() },
		"resize":    func(g *Guard) { require.True(t, g.TryLockResize(&resize)) },
		"unresize":  func(g *Guard) { g.Unlocking(Resize, &resize).Unlock() },
		"source":    func(g *Guard) { g.Locking(Source, &source).Lock() },
		"unsource":  func(g *Guard) { g.Unlocking(Source, &source).Unlock() },
		"primary":   func(g *Guard) { g.Primary(&slot, 0) },
		"unprimary": func(g *Guard) { g.Unlock() },
		"end":       func(g *Guard) { g.End() },
	}
	cases := []struct {
		name  string
		steps []string
		panic string // substring of the panic, "" for none
	}{
		{"a write", []string{"port", "line", "unline", "line", "unline", "unport", "end"}, ""},
		{"a write that resizes", []string{"port", "line", "unline", "resize", "line", "unline", "line", "unline", "unresize", "unport", "end"}, ""},
		{"bind(0)'s draws between ports", []string{"source", "unsource", "port", "unport", "source", "unsource", "port", "unport", "end"}, ""},
		{"a fixed write's draw", []string{"source", "unsource", "primary", "unprimary"}, ""},
		{"line before the port", []string{"line"}, "an index line lock without the port record lock"},
		{"line after the port's release", []string{"port", "unport", "line"}, "an index line lock without the port record lock"},
		{"two lines", []string{"port", "line", "line2"}, "an index line lock while holding an index line lock"},
		{"two ports", []string{"port", "port2"}, "a port record lock while holding a port record lock"},
		{"port inside a line", []string{"port", "line", "port2"}, "a port record lock while holding an index line lock"},
		{"resize inside a line", []string{"port", "line", "resize"}, "a resize lock while holding an index line lock"},
		{"resize before the port", []string{"resize"}, "a resize lock without the port record lock"},
		{"second resize", []string{"port", "resize", "resize"}, "a second resize lock"},
		{"draw under the port", []string{"port", "source"}, "the random source's lock while holding a port record lock"},
		{"draw under a slot", []string{"primary", "source"}, "the random source's lock while holding a slot lock"},
		{"port under the draw", []string{"source", "port"}, "a port record lock while holding the random source's lock"},
		{"primary under the draw", []string{"source", "primary"}, "primary slot 0 while holding the random source's lock"},
		{"port released before its line", []string{"port", "line", "unport"}, "releases a port record lock while holding an index line lock"},
		{"resize released before its line", []string{"port", "resize", "line", "unresize"}, "releases a resize lock while holding an index line lock"},
		{"line released twice", []string{"port", "line", "unline", "unline"}, "releases an index line lock it does not hold"},
		{"write ends holding its port", []string{"port", "end"}, "a write ends holding a port record lock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := new(Guard)
			var got any
			func() {
				defer func() { got = recover() }()
				for _, s := range tc.steps {
					steps[s](g)
				}
			}()
			if tc.panic == "" {
				assert.Nil(t, got)
			} else {
				require.NotNil(t, got, "no panic")
				assert.Contains(t, got, tc.panic)
			}
			// The check comes before the lock: a step that panicked took
			// nothing. Free what the steps before it took.
			for _, m := range []*Mutex{&port, &port2, &line, &line2, &resize, &source, &slot} {
				m.mu.TryLock()
				m.mu.Unlock()
			}
		})
	}
}

// TestNilGuardLocks: a nil Guard, a growing write's with checking off,
// takes and releases its locks and keeps no books.
func TestNilGuardLocks(t *testing.T) {
	var g *Guard
	var m Mutex
	for _, tc := range []struct {
		name          string
		lock, release func()
	}{
		{"port", func() { g.Locking(Port, &m).Lock() }, func() { g.Unlocking(Port, &m).Unlock() }},
		{"line", func() { g.Locking(Line, &m).Lock() }, func() { g.Unlocking(Line, &m).Unlock() }},
		{"resize", func() { require.True(t, g.TryLockResize(&m)) }, func() { g.Unlocking(Resize, &m).Unlock() }},
		{"source", func() { g.Locking(Source, &m).Lock() }, func() { g.Unlocking(Source, &m).Unlock() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.lock()
			assert.False(t, m.mu.TryLock(), "not locked")
			assert.False(t, g.TryLockResize(&m), "a busy resize lock taken")
			tc.release()
			require.True(t, m.mu.TryLock(), "not released")
			m.mu.Unlock()
		})
	}
	g.End()
}

// TestBeginFollowsChecking: a write of the growing storage gets a Guard
// only while checking is on.
func TestBeginFollowsChecking(t *testing.T) {
	defer SetChecking(SetChecking(false))
	assert.Nil(t, Begin())
	SetChecking(true)
	g := Begin()
	require.NotNil(t, g)
	g.End()
}

// TestFirstViolationReported: the releases a write defers, which run as
// its panic unwinds, check nothing more, so that the panic a test
// recovers names the first violation, not a release it caused.
func TestFirstViolationReported(t *testing.T) {
	defer SetChecking(SetChecking(true))
	var port, line, line2 Mutex
	g := Begin()
	var got any
	func() {
		defer func() { got = recover() }()
		g.Locking(Port, &port).Lock()
		defer func() { g.Unlocking(Port, &port).Unlock() }() // the release a write defers
		g.Locking(Line, &line).Lock()
		g.Locking(Line, &line2).Lock()
	}()
	assert.Equal(t, "lockorder: an index line lock while holding an index line lock", got)
	assert.True(t, port.mu.TryLock(), "the port's lock still held")
	assert.True(t, line2.mu.TryLock(), "the refused lock taken")
}

// TestUnlockChecksAgain: a fixed storage's Guard, used again after Unlock
// (its handle is pooled), checks again after a violation.
func TestUnlockChecksAgain(t *testing.T) {
	defer SetChecking(SetChecking(true))
	var slot, source Mutex
	var g Guard
	for range 2 {
		g.Primary(&slot, 0)
		require.PanicsWithValue(t, "lockorder: the random source's lock while holding a slot lock",
			func() { g.Locking(Source, &source).Lock() })
		g.Unlock()
	}
}
