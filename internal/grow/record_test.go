package grow

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
)

// TestLockPortExcludes: writers that race to make a port's record, again
// and again as each Unlock of the empty port drops it, still hold the
// port one at a time; and no record is left once all are done. The race
// that matters (two writers both find the slot empty) falls in a window
// of a few instructions: one run of the writers missed it 4 times in
// 200, so the run is repeated on fresh engines until one fails, or ten
// have passed.
func TestLockPortExcludes(t *testing.T) {
	for range 10 {
		lockPortExcludes(t)
		if t.Failed() {
			return
		}
	}
}

func lockPortExcludes(t *testing.T) {
	g := New([4]uint64{1, 2, 3, 4}, 10, 5, &bind.Occupancy{}, bind.NewRand(nil))
	const writers, rounds = 4, 2000
	const ports = 8
	var inside [ports]atomic.Int64 // writers holding each port
	var overlaps atomic.Int64
	var start sync.WaitGroup
	start.Add(1)
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			for i := range rounds {
				p := i % ports
				pr := g.LockPort(uint16(1000 + p))
				if inside[p].Add(1) != 1 {
					overlaps.Add(1)
				}
				runtime.Gosched()
				inside[p].Add(-1)
				g.Unlock(pr)
			}
		}()
	}
	start.Done()
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "writers that held a port at once")
	var bad []string
	g.Verify(func(format string, args ...any) { bad = append(bad, format) })
	require.Empty(t, bad)
	records, _, _, _, _, _ := g.Sizes()
	assert.Zero(t, records, "ports with a record")
}

// TestLockPortSkipsDeadRecord: a writer that waited for a port's record
// while its holder dropped it (the Unlock of an empty port) does not
// write through the dropped record, but through the one in the port's
// slot. TestLockPortExcludes sees this only when the race happens to
// fall so; here the waiter is made to wait on the record before the drop
// (if it had not loaded the record yet, it finds the slot empty, and
// the round proves nothing but fails nothing either).
func TestLockPortSkipsDeadRecord(t *testing.T) {
	g := New([4]uint64{1, 2, 3, 4}, 10, 5, &bind.Occupancy{}, bind.NewRand(nil))
	const port = 1000
	slot := func() *Port { return g.pages[port>>8].Load().recs[port&255].Load() }
	for range 20 {
		held := g.LockPort(port)
		got := make(chan *Port)
		go func() { got <- g.LockPort(port) }()
		time.Sleep(2 * time.Millisecond) // the waiter loads held and waits
		g.Unlock(held)                   // empty: drops held
		pr := <-got
		assert.NotSame(t, held, pr, "the waiter took the dropped record")
		assert.Same(t, slot(), pr, "the waiter's record is not its port's")
		g.Unlock(pr)
		if t.Failed() {
			return
		}
	}
	assert.Nil(t, slot(), "a record left for an empty port")
}
