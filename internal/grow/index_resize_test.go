package grow

// The concurrency tests of the resizing map, the readers they run, and a
// hash of int keys.

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// intMap is an index under test, keyed by ints that it hashes with Hash. Get
// reports a value only if it is the one stored with Put (an adapter that
// stores more than the int checks the rest itself).
type intMap interface {
	Put(k, v int)
	Del(k int)
	Get(k int) (v int, ok bool)
	Len() int
}

// putThenDelete puts keys 0 to n-1, each as its own value, then deletes
// them: a grow and a shrink, or several.
func putThenDelete(m intMap, n int) {
	for k := range n {
		m.Put(k, k)
	}
	for k := range n {
		m.Del(k)
	}
}

// resizeUnderReaders: while a writer adds and removes keys, growing and
// shrinking the table many times, readers must always find the keys that
// never change, with their values, and never find a key deleted before
// the read began.
func resizeUnderReaders(t *testing.T, m intMap) {
	const stable = 64
	for k := range stable {
		m.Put(k, k+1)
	}
	var gone [1 << 16]atomic.Bool // churn keys deleted for good
	stop := startReaders(2, 7, func(rng *rand.Rand) (fails int) {
		k := rng.IntN(stable)
		if v, ok := m.Get(k); !ok || v != k+1 {
			fails++
		}
		c := stable + rng.IntN(1<<16-stable)
		if gone[c].Load() {
			if _, ok := m.Get(c); ok {
				fails++
			}
		}
		return fails
	})
	deadline := time.Now().Add(2 * time.Second)
	next := stable
	for time.Now().Before(deadline) && next+5000 < 1<<16 {
		// Grow by 5000 keys, then delete them all: several grows and
		// shrinks per round.
		for k := next; k < next+5000; k++ {
			m.Put(k, k+1)
		}
		for k := next; k < next+5000; k++ {
			m.Del(k)
			gone[k].Store(true)
		}
		next += 5000
	}
	reads, fails := stop()
	assert.Zero(t, fails, "wrong reads among %d", reads)
	assert.Positive(t, reads)
	assert.Equal(t, stable, m.Len())
}

// addedDuringResize: keys that one writer adds while another grows and
// shrinks the table (by 20 000 keys a round, past the first writer's few
// thousand), many of them into slots already forwarded, are found by
// every lookup that begins after they were added, also by one that still
// reads the table being replaced.
func addedDuringResize(t *testing.T, m intMap) {
	const base = 1 << 20 // the second writer's keys: base, base+1, …
	var added atomic.Int64
	stop := startReaders(2, 9, func(rng *rand.Rand) (fails int) {
		if n := added.Load(); n > 0 {
			k := base + int(rng.Int64N(n))
			if v, ok := m.Get(k); !ok || v != k {
				fails++
			}
		}
		return fails
	})
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// About one key a millisecond, so that the keys stay few enough
		// for the table to shrink too, and many land during a resize.
		for k := base; !done.Load(); k++ {
			m.Put(k, k)
			added.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		putThenDelete(m, 20000)
	}
	done.Store(true)
	wg.Wait()
	reads, fails := stop()
	assert.Zero(t, fails, "missed keys among %d reads", reads)
	assert.Positive(t, added.Load())
}

// writesDuringShrink: one writer grows a small map (PutThenDelete of n
// keys) and shrinks it back again and again, while two others each put a
// key, read it back, delete it and check it gone. A shrink merges a pair
// of slots or lines: a write to the second of a pair while it is merged
// would be lost (the merge has read its old contents) or would land where
// the map no longer looks, unless the merge holds the pair's locks.
func writesDuringShrink(t *testing.T, m intMap, n int) {
	var done atomic.Bool
	var lost, writes atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := (w + 1) << 20
			for v := 1; !done.Load(); v++ {
				k := base + v%4096
				m.Put(k, v)
				if got, ok := m.Get(k); !ok || got != v {
					lost.Add(1)
				}
				m.Del(k)
				if _, ok := m.Get(k); ok {
					lost.Add(1)
				}
				writes.Add(2)
			}
		}()
	}
	rounds := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && lost.Load() == 0; rounds++ {
		putThenDelete(m, n)
	}
	done.Store(true)
	wg.Wait()
	t.Logf("%d rounds of grows and shrinks, %d writes beside them", rounds, writes.Load())
	assert.Zero(t, lost.Load(), "writes lost")
	assert.Positive(t, writes.Load())
	assert.Zero(t, m.Len(), "keys left after every one was deleted")
	for k := range n {
		_, ok := m.Get(k)
		assert.False(t, ok, "deleted key %d found", k)
	}
}

// mix is splitmix64's finalizer of k: a hash whose every bit depends on
// every bit of k, as the indexes' slot and tag bits need.
func mix(k int) uint64 {
	x := uint64(k) + 0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// startReaders starts n goroutines that call read, each with a random source of
// its own seeded from seed, until the returned stop is called; stop waits
// for them and returns how many reads they made and the sum of the wrong
// answers read reported.
func startReaders(n int, seed uint64, read func(*rand.Rand) (fails int)) (stop func() (reads, fails int64)) {
	var halt atomic.Bool
	var wg sync.WaitGroup
	var nreads, nfails atomic.Int64
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), seed))
			for !halt.Load() {
				nfails.Add(int64(read(rng)))
				nreads.Add(1)
			}
		}()
	}
	return func() (int64, int64) {
		halt.Store(true)
		wg.Wait()
		return nreads.Load(), nfails.Load()
	}
}
