package rhash

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/internal/indextest"
)

var hashOf = indextest.Hash

// kv is the tests' value: a value that names its key, as New requires.
type kv struct{ k, v int }

func newMap() *Map[int, kv] { return New(func(x *kv, k int) bool { return x.k == k }) }

// set is Update with hash h, setting k's value to v.
func set(m *Map[int, kv], h uint64, k, v int) {
	m.Update(h, k, func(kv, bool) (kv, bool) { return kv{k, v}, true })
}

// unset is Update with hash h, deleting k.
func unset(m *Map[int, kv], h uint64, k int) {
	m.Update(h, k, func(kv, bool) (kv, bool) { return kv{}, false })
}

// lookup is Get with hash h, returning k's value.
func lookup(m *Map[int, kv], h uint64, k int) (int, bool) {
	x, ok := m.Get(h, k)
	return x.v, ok
}

func put(m *Map[int, kv], k, v int)          { set(m, hashOf(k), k, v) }
func del(m *Map[int, kv], k int)             { unset(m, hashOf(k), k) }
func get(m *Map[int, kv], k int) (int, bool) { return lookup(m, hashOf(k), k) }

// putThenDelete puts keys 0 to n-1, each as its own value, then deletes
// them: a grow and a shrink, or several.
func putThenDelete(m *Map[int, kv], n int) {
	for k := range n {
		put(m, k, k)
	}
	for k := range n {
		del(m, k)
	}
}

func TestGrowShrink(t *testing.T) {
	m := newMap()
	for _, n := range []int{1, 100, 10000} {
		for k := range n {
			put(m, k, k*2)
		}
		assert.Equal(t, n, m.Len())
		assert.GreaterOrEqual(t, m.Slots(), n, "one key per slot at most")
		for k := range n {
			v, ok := get(m, k)
			require.True(t, ok, k)
			require.Equal(t, k*2, v)
		}
		_, ok := get(m, n)
		assert.False(t, ok)
		assert.True(t, m.TagsExact())
		seen := map[int]int{}
		m.All(func(x kv) bool {
			assert.Equal(t, 2*x.k, x.v)
			seen[x.k]++
			return true
		})
		assert.Len(t, seen, n)
		for k := range n {
			del(m, k)
		}
		assert.Zero(t, m.Len())
		assert.Equal(t, minSlots, m.Slots(), "shrinks back")
		assert.True(t, m.TagsExact())
	}
}

// TestUpdateReplaces checks that the chain copy keeps the other keys of a
// slot, whatever the position of the replaced or deleted key.
func TestUpdateReplaces(t *testing.T) {
	m := newMap()
	// Keys with the same hash share a chain.
	h := uint64(42)
	for k := range 5 {
		set(m, h, k, k)
	}
	for _, k := range []int{0, 2, 4} {
		m.Update(h, k, func(old kv, ok bool) (kv, bool) {
			require.True(t, ok)
			return kv{k, old.v + 100}, true
		})
	}
	unset(m, h, 3)
	for k, want := range map[int]int{0: 100, 1: 1, 2: 102, 4: 104} {
		v, ok := lookup(m, h, k)
		require.True(t, ok, k)
		assert.Equal(t, want, v, k)
	}
	_, ok := lookup(m, h, 3)
	assert.False(t, ok)
	assert.Equal(t, 4, m.Len())
	assert.True(t, m.TagsExact())
}

// TestTags: keys of one slot with every tag, and keys that share a tag,
// removed one by one; each removal clears exactly the bits no remaining
// key needs, and a missing key of the slot is found absent either way.
func TestTags(t *testing.T) {
	m := newMap()
	// Slot 0 of the 8-slot table, tag b in bits 58–60; keys 4–7 repeat
	// the tags of 0–3.
	const keys = 8
	hash := func(k int) uint64 { return uint64(k%4) << 58 }
	for k := range keys {
		set(m, hash(k), k, k)
	}
	require.Equal(t, minSlots, m.Slots())
	for k := range keys {
		require.True(t, m.TagsExact(), "before deleting %d", k)
		unset(m, hash(k), k)
		_, ok := lookup(m, hash(k), k)
		require.False(t, ok, k)
		for j := k + 1; j < keys; j++ {
			v, ok := lookup(m, hash(j), j)
			require.True(t, ok, "key %d after deleting %d", j, k)
			require.Equal(t, j, v)
		}
	}
	assert.True(t, m.TagsExact())
}

// TestResizeUnderReaders: while writers add and remove keys, growing and
// shrinking the table many times, readers must always find the keys that
// never change, with their values, and never find a key deleted before the
// read began.
func TestResizeUnderReaders(t *testing.T) {
	m := newMap()
	const stable = 64
	for k := range stable {
		put(m, k, k+1)
	}
	var gone [1 << 16]atomic.Bool // churn keys deleted for good
	stop := indextest.StartReaders(2, 7, func(rng *rand.Rand) (fails int) {
		k := rng.IntN(stable)
		if v, ok := get(m, k); !ok || v != k+1 {
			fails++
		}
		c := stable + rng.IntN(1<<16-stable)
		if gone[c].Load() {
			if _, ok := get(m, c); ok {
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
			put(m, k, k+1)
		}
		for k := next; k < next+5000; k++ {
			del(m, k)
			gone[k].Store(true)
		}
		next += 5000
	}
	reads, fails := stop()
	assert.Zero(t, fails, "wrong reads among %d", reads)
	assert.Positive(t, reads)
	assert.Equal(t, stable, m.Len())
}

// TestAddedDuringResize: keys that one writer adds while another grows
// and shrinks the table (by 20 000 keys a round, past the first writer's
// few thousand), many of them into slots already forwarded, are
// found by every lookup that begins after they were added, also by one
// that still reads the table being replaced.
func TestAddedDuringResize(t *testing.T) {
	m := newMap()
	const base = 1 << 20 // the second writer's keys: base, base+1, …
	var added atomic.Int64
	stop := indextest.StartReaders(2, 9, func(rng *rand.Rand) (fails int) {
		if n := added.Load(); n > 0 {
			k := base + int(rng.Int64N(n))
			if v, ok := get(m, k); !ok || v != k {
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
			put(m, k, k)
			added.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		putThenDelete(m, 20000)
	}
	done.Store(true)
	wg.Wait()
	reads, fails := stop()
	assert.Zero(t, fails, "missed keys among %d reads", reads)
	assert.Positive(t, added.Load())
}

func BenchmarkGet(b *testing.B) {
	for _, n := range []int{16, 1 << 20} {
		m := newMap()
		for k := range n {
			put(m, k, k)
		}
		keys := make([]int, 4096)
		for i := range keys {
			keys[i] = rand.IntN(n)
		}
		b.Run(itoa(n), func(b *testing.B) {
			for i := range b.N {
				k := keys[i&4095]
				if _, ok := get(m, k); !ok {
					b.Fatal(k)
				}
			}
		})
	}
}

func itoa(n int) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			return s
		}
	}
}

// TestWritesDuringShrink: one writer grows a small map and shrinks it
// back again and again, while two others each put a key, read it back,
// delete it and check it gone, going through keys that fall in every
// slot, with one key each at most, so that the map can shrink. A shrink
// merges slot pairs that may lie in two lines, whose locks it must both
// hold: a write to the second slot of a pair while it is merged would be
// lost (the merge has read the slot's old chain) or would land in a slot
// already forwarded.
func TestWritesDuringShrink(t *testing.T) {
	m := newMap()
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
				put(m, k, v)
				if got, ok := get(m, k); !ok || got != v {
					lost.Add(1)
				}
				del(m, k)
				if _, ok := get(m, k); ok {
					lost.Add(1)
				}
				writes.Add(2)
			}
		}()
	}
	rounds := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && lost.Load() == 0; rounds++ {
		// 8 → 64 slots and back (below 8 keys): every size's table
		// has pairs that straddle two lines.
		putThenDelete(m, 60)
	}
	done.Store(true)
	wg.Wait()
	t.Logf("%d rounds of grows and shrinks, %d writes beside them", rounds, writes.Load())
	assert.Zero(t, lost.Load(), "writes lost")
	assert.Positive(t, writes.Load())
	assert.Zero(t, m.Len(), "keys left after every one was deleted")
	for k := range 60 {
		_, ok := get(m, k)
		assert.False(t, ok, "deleted key %d found", k)
	}
}
