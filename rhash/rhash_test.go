package rhash

import (
	"math/rand/v2"
	"testing"

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

// TestResizeUnderReaders, TestAddedDuringResize, TestWritesDuringShrink:
// the concurrency tests every resizing index passes (package indextest).
// A shrink's 60 keys take the map from 8 to 64 slots and back: every
// size's table has pairs that straddle two lines, whose locks the merge
// must both hold.
func TestResizeUnderReaders(t *testing.T) { indextest.ResizeUnderReaders(t, imap{newMap()}) }
func TestAddedDuringResize(t *testing.T)  { indextest.AddedDuringResize(t, imap{newMap()}) }
func TestWritesDuringShrink(t *testing.T) { indextest.WritesDuringShrink(t, imap{newMap()}, 60) }

// imap is the tests' map as indextest sees it.
type imap struct{ m *Map[int, kv] }

func (m imap) Put(k, v int)               { put(m.m, k, v) }
func (m imap) Del(k int)                  { del(m.m, k) }
func (m imap) Get(k int) (v int, ok bool) { return get(m.m, k) }
func (m imap) Len() int                   { return m.m.Len() }

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
