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
