// Package indextest holds what the tests of udpdemux's resizing indexes
// (rhash, bhash) share: concurrent readers that check lookups against what
// writers guarantee and count the reads and the wrong answers, so that a
// test can assert both, and a hash of int keys.
package indextest

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Hash is splitmix64's finalizer of k: a hash whose every bit depends on
// every bit of k, as the indexes' slot and tag bits need.
func Hash(k int) uint64 {
	x := uint64(k) + 0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// StartReaders starts n goroutines that call read, each with a random source of
// its own seeded from seed, until the returned stop is called; stop waits
// for them and returns how many reads they made and the sum of the wrong
// answers read reported.
func StartReaders(n int, seed uint64, read func(*rand.Rand) (fails int)) (stop func() (reads, fails int64)) {
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
