// Package rhash is a hash index that grows and shrinks with what it holds
// while lookups run. Lookups take no lock, never wait and never miss a key
// that is present throughout; writers lock the line of seven slots that
// holds theirs (two lines while a shrink merges a pair across them).
// udpdemux's growing tables keep their port records in one. It is an
// implementation package of udpdemux, with no compatibility promise.
//
// # How it resizes without stopping readers
//
// Chains are immutable: a write builds a new node (and copies the few
// nodes ahead of it) and publishes the new chain head with one atomic
// store, so a reader always walks a consistent chain. To resize, the writer
// that crosses the load bound makes a table of twice (or half) the slots,
// records it as the old table's successor, and moves the old slots one by
// one: under a slot's lock it builds the new chains that slot feeds, stores
// them in the new table, and then stores the forwarding marker in the old
// slot. A reader or writer that meets the marker goes on in the successor,
// where the chains it needs are already complete; one that meets a slot not
// yet moved finds its current contents there, because writers of that slot
// still write to the old table until it moves. When every slot has moved,
// the successor becomes the table. Linux's rhashtable follows the same
// rule (a bucket is either still live in the old table or complete in the
// new one), with RCU where Go has its garbage collector.
//
// Slots are indexed by the top bits of a 64-bit hash that the caller
// computes (seeded, so that no outsider can aim keys at one slot); growing
// splits old slot i into new slots 2i and 2i+1, shrinking merges them back.
//
// # Tags
//
// Beside each slot is a byte of tags: bit b is set if a key of the slot
// may have tag b, three bits of its hash just below those that pick the
// slot. Slots sit seven to a cache line with their tags, so a lookup
// reads a slot's tags with its chain head, and goes no further when its
// key's bit is clear: a lookup of a key that is not there costs one cache
// miss instead of two (the slot, then the first node), and usually none
// more in a slot that holds other keys. A key is seen once it is in its chain and its bit is set, in
// either order; a writer clears a bit only when no other key of the slot
// needs it, and sets every bit of a slot before it forwards it, so the
// tags of a table that lookups still read never hide a key that writers
// added to its successor.
package rhash

import (
	"sync"
	"sync/atomic"

	"github.com/udpdemux/udpdemux/internal/cow"
)

// minSlots is the smallest table; a map never shrinks below it.
const minSlots = 8

// node is one key of a chain. Nodes are immutable once published. The
// key is not in the node: the value names it (see New).
type node[K any, V any] = cow.Node[V]

// table is one generation of slots.
type table[K any, V any] struct {
	lines []line[K, V] // slot i is lines[i/7].slots[i%7]
	n     int          // slots
	// locks[l] guards writes to the slots of lines[l] and their tags: a
	// lock a line, not a slot, since a mutex is as large as a slot and
	// writers of one line are rare enough to share it.
	locks []sync.Mutex
	shift uint8 // slot of hash h: h >> shift
	// next is the table being filled from this one; set before the first
	// slot is forwarded, then never changed.
	next atomic.Pointer[table[K, V]]
}

// line is seven slots and their tags, a cache line: a lookup reads a
// slot's tags and its chain head with one miss. The tags of slot 7l+j are
// byte j of tags; a writer of the slot changes only that byte, under the
// line's lock.
type line[K any, V any] struct {
	tags  atomic.Uint64
	slots [7]atomic.Pointer[node[K, V]]
}

// slot returns slot i.
func (t *table[K, V]) slot(i uint64) *atomic.Pointer[node[K, V]] { return &t.lines[i/7].slots[i%7] }

// lock returns the lock of slot i's line.
func (t *table[K, V]) lock(i uint64) *sync.Mutex { return &t.locks[i/7] }

func newTable[K any, V any](n int) *table[K, V] {
	shift := uint8(64)
	for m := n; m > 1; m >>= 1 {
		shift--
	}
	return &table[K, V]{
		lines: make([]line[K, V], (n+6)/7),
		n:     n,
		locks: make([]sync.Mutex, (n+6)/7),
		shift: shift,
	}
}

// tag returns the tag bit of hash h in t: one of the three bits of h just
// below those that pick its slot. A table has at least 8 slots, so shift
// is at most 61.
func (t *table[K, V]) tag(h uint64) uint64 { return 1 << (h >> (t.shift - 3) & 7) }

// tagsAt returns slot i's tag byte.
func (t *table[K, V]) tagsAt(i uint64) uint64 {
	return t.lines[i/7].tags.Load() >> (8 * (i % 7)) & 0xff
}

// setTags makes slot i's tag byte b: first the union of old and new, then
// b, so that no moment shows fewer bits than either. The caller holds
// slot i's lock.
func (t *table[K, V]) setTags(i uint64, b uint64) {
	sh := 8 * (i % 7)
	w := &t.lines[i/7].tags
	w.Or(b << sh)
	w.And(^((^b & 0xff) << sh))
}

// tagsOf returns the tag byte of the chain from n in t.
func (t *table[K, V]) tagsOf(n *node[K, V]) uint64 {
	var b uint64
	for ; n != nil; n = n.Next {
		b |= t.tag(n.Hash)
	}
	return b
}

// Map maps keys to values. The zero Map is not usable: call New.
type Map[K any, V any] struct {
	tab      atomic.Pointer[table[K, V]]
	moved    *node[K, V] // the forwarding marker of this map
	count    atomic.Int64
	resizing sync.Mutex       // held by the one writer that resizes
	is       func(*V, K) bool // whether a value is stored under a key
}

// New returns an empty map of values that name their keys: is reports
// whether value v is stored under key k. A node then holds its value, its
// hash and its link, not a second copy of the key. is runs only on a value
// whose hash matched, and so nearly always on the one sought.
func New[K any, V any](is func(v *V, k K) bool) *Map[K, V] {
	m := &Map[K, V]{moved: new(node[K, V]), is: is}
	m.tab.Store(newTable[K, V](minSlots))
	return m
}

// Len returns the number of keys.
func (m *Map[K, V]) Len() int { return int(m.count.Load()) }

// Slots returns the number of slots of the current table.
func (m *Map[K, V]) Slots() int { return m.tab.Load().n }

// Get returns the value of key k, whose hash is h. It takes no lock, and
// the value it returns was k's at some moment during the call: chains are
// immutable, so the one it walks stays consistent however the map changes.
func (m *Map[K, V]) Get(h uint64, k K) (V, bool) {
	t := m.tab.Load()
	for {
		i := h >> t.shift
		l := &t.lines[i/7]
		if l.tags.Load()>>(8*(i%7))&t.tag(h) == 0 {
			break
		}
		n := l.slots[i%7].Load()
		if n == m.moved {
			t = t.next.Load()
			continue
		}
		for ; n != nil; n = n.Next {
			if n.Hash == h && m.is(&n.Val, k) {
				return n.Val, true
			}
		}
		break
	}
	var zero V
	return zero, false
}

// Update sets the value of key k, whose hash is h, to what f returns
// given its present value (ok reports whether there is one): keep false
// deletes the key; a value kept must name k (is must accept it). f runs
// with the key's slot locked and must not call the map. Update may then
// resize the map, which costs the caller O(keys).
func (m *Map[K, V]) Update(h uint64, k K, f func(old V, ok bool) (v V, keep bool)) {
	t := m.tab.Load()
	for {
		i := h >> t.shift
		t.lock(i).Lock()
		head := t.slot(i).Load()
		if head == m.moved {
			t.lock(i).Unlock()
			t = t.next.Load()
			continue
		}
		var old *node[K, V]
		for n := head; n != nil; n = n.Next {
			if n.Hash == h && m.is(&n.Val, k) {
				old = n
				break
			}
		}
		var cur V
		if old != nil {
			cur = old.Val
		}
		v, keep := f(cur, old != nil)
		switch {
		case old != nil && keep:
			t.slot(i).Store(cow.Replace(head, old, &node[K, V]{Hash: h, Val: v}))
		case old != nil:
			rest := cow.Replace(head, old, nil)
			t.slot(i).Store(rest)
			t.setTags(i, t.tagsOf(rest))
			m.count.Add(-1)
		case keep:
			t.setTags(i, t.tagsOf(head)|t.tag(h))
			t.slot(i).Store(&node[K, V]{Hash: h, Val: v, Next: head})
			m.count.Add(1)
		}
		t.lock(i).Unlock()
		m.maybeResize()
		return
	}
}

// maybeResize grows the table past one key per slot on average, and
// shrinks it below one per eight, unless another writer is resizing.
func (m *Map[K, V]) maybeResize() {
	t := m.tab.Load()
	n, slots := m.count.Load(), int64(t.n)
	if n <= slots && (n >= slots/8 || slots <= minSlots) {
		return
	}
	if !m.resizing.TryLock() {
		return
	}
	defer m.resizing.Unlock()
	t = m.tab.Load()
	n, slots = m.count.Load(), int64(t.n)
	switch {
	case n > slots:
		m.grow(t)
	case n < slots/8 && slots > minSlots:
		m.shrink(t)
	}
}

// grow moves every slot of t into a table of twice the slots.
func (m *Map[K, V]) grow(t *table[K, V]) {
	nt := newTable[K, V](2 * t.n)
	t.next.Store(nt)
	for i := range uint64(t.n) {
		t.lock(i).Lock()
		var lo, hi *node[K, V]
		for n := t.slot(i).Load(); n != nil; n = n.Next {
			c := &node[K, V]{Hash: n.Hash, Val: n.Val}
			if n.Hash>>nt.shift&1 == 0 {
				c.Next, lo = lo, c
			} else {
				c.Next, hi = hi, c
			}
		}
		nt.setTags(2*i, nt.tagsOf(lo))
		nt.setTags(2*i+1, nt.tagsOf(hi))
		nt.slot(2 * i).Store(lo)
		nt.slot(2*i + 1).Store(hi)
		// Every bit, before the marker: a lookup that still reads this
		// table must go on to the successor, which may hold keys these
		// tags never had.
		t.setTags(i, 0xff)
		t.slot(i).Store(m.moved)
		t.lock(i).Unlock()
	}
	m.tab.Store(nt)
}

// shrink merges every pair of slots of t into a table of half the slots.
func (m *Map[K, V]) shrink(t *table[K, V]) {
	nt := newTable[K, V](t.n / 2)
	t.next.Store(nt)
	for j := range uint64(nt.n) {
		a, b := 2*j, 2*j+1
		// a and b share a line unless b starts the next one; the lower
		// line's lock comes first.
		la, lb := t.lock(a), t.lock(b)
		la.Lock()
		if lb != la {
			lb.Lock()
		}
		var merged *node[K, V]
		for _, s := range []uint64{a, b} {
			for n := t.slot(s).Load(); n != nil; n = n.Next {
				merged = &node[K, V]{Hash: n.Hash, Val: n.Val, Next: merged}
			}
		}
		nt.setTags(j, nt.tagsOf(merged))
		nt.slot(j).Store(merged)
		t.setTags(a, 0xff)
		t.setTags(b, 0xff)
		t.slot(a).Store(m.moved)
		t.slot(b).Store(m.moved)
		if lb != la {
			lb.Unlock()
		}
		la.Unlock()
	}
	m.tab.Store(nt)
}

// All calls f for every value, slot by slot, until f returns false. A key
// that is present throughout is seen exactly once; one added or removed
// meanwhile may or may not be.
func (m *Map[K, V]) All(f func(V) bool) {
	t := m.tab.Load()
	for i := range t.n {
		if !m.walk(t, i, t.shift, uint64(i), f) {
			return
		}
	}
}

// walk visits the keys of slot j of t whose hashes h have h>>shift == want
// (the slot they had in the table All started from), following forwarded
// slots into successors: after a grow a slot's keys are in two slots, after
// a shrink in one slot shared with its sibling's keys.
func (m *Map[K, V]) walk(t *table[K, V], j int, shift uint8, want uint64, f func(V) bool) bool {
	n := t.slot(uint64(j)).Load()
	if n == m.moved {
		nt := t.next.Load()
		if nt.n > t.n {
			return m.walk(nt, 2*j, shift, want, f) && m.walk(nt, 2*j+1, shift, want, f)
		}
		return m.walk(nt, j/2, shift, want, f)
	}
	for ; n != nil; n = n.Next {
		if n.Hash>>shift == want && !f(n.Val) {
			return false
		}
	}
	return true
}

// TagsExact reports whether every slot's tags are exactly those of its
// keys. Call it when no write is in flight.
func (m *Map[K, V]) TagsExact() bool {
	t := m.tab.Load()
	for i := range t.n {
		if t.tagsAt(uint64(i)) != t.tagsOf(t.slot(uint64(i)).Load()) {
			return false
		}
	}
	return true
}
