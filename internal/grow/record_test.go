package grow

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
)

// TestLockPortExcludes: writers that race to make a port's record, again
// and again as each Unlock of the empty port drops it, still hold the
// port one at a time; and no record is left once all are done.
func TestLockPortExcludes(t *testing.T) {
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
