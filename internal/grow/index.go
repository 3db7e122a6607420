// The address and 4-tuple indexes (addrs and conns) are Maps: hash indexes
// of pointers that grow and shrink with what they hold while lookups run. A key's pointer sits in the cache line
// its hash picks, one of six beside a byte of tag each, so that a lookup
// reads that line and then the object the pointer leads to: the same two
// cache misses as a chained index whose node holds a copy of the object,
// without the node. Lookups take no lock and never wait, and never miss a
// key that is present throughout; writers lock the line that holds theirs
// (lines share locks in groups of four).
//
// # Values
//
// A key's value is a Val: its first pointer and, for the few keys that need
// them, an immutable list of more (udpdemux's classes beyond the first). A
// value with no more pointers sits in a position of its line; one with
// more, or one whose line has no free position, sits in the line's
// overflow chain, whose nodes hold the whole value and are immutable. A
// key moves from a position to the chain when it gets more
// pointers, and never back (until a resize rebuilds its line): a lookup
// reads the positions first and the chain after, and a key that moved the
// other way between the two reads would be missed.
//
// # How lookups stay correct
//
// A line's tags and its forwarding bit share one word, which writers store
// whole under the line's lock. A writer that puts a key in a position
// stores the pointer before the tag, and one that takes a key out clears
// the tag before the pointer; one that moves a key to the overflow chain
// publishes it there before it clears the tag. A lookup loads the word
// once, then each position whose tag matches, then the chain: a position
// it reads may meanwhile hold another key, or none, which the key check
// rejects, but a key present throughout is where the word said, or in the
// chain by the time the lookup reads it.
//
// # How it resizes without stopping readers
//
// The writer that crosses the load bound makes a table of twice (or half)
// the lines, records it as the old table's successor, and moves the old
// lines one by one: under a line's lock it fills the line or two lines of
// the successor that the old one feeds, then sets the old line's
// forwarding bit. A lookup or writer that meets the bit goes on in the
// successor, whose lines it needs are complete; one that meets a line not
// yet moved finds its current contents there, because writers still write
// to the old table until the line moves. This is Linux rhashtable's rule:
// a bucket is either live in the old table or complete in the new one. The positions do not keep their keys' hashes, so a resize
// asks the caller's hash function for each.

package grow

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/udpdemux/udpdemux/lockorder"
)

const (
	// width is how many keys a line keeps in positions: six pointers,
	// the word of tags and the overflow chain's head fill 64 bytes.
	width = 6
	// fwd, in a line's word, says the line has moved to the successor.
	fwd = 1 << 63
	// minLines is the smallest table; a map never shrinks below it.
	minLines = 2
	// maxLoad is the keys a line holds on average before the table
	// doubles: at four of six, 4.9 % of the keys were in chains at the
	// bound (0.3 % just after a grow), and the lines cost 16 to 32 bytes
	// a key.
	maxLoad = 4
	// lockSpan is how many lines share a lock: an even number, so that
	// the two lines a shrink merges share one.
	lockSpan = 4

	lo6 = 0x0000_0101_0101_0101 // the low bit of each position's byte
	hi6 = 0x0000_8080_8080_8080 // the high bit of each position's byte
)

// Val is the value of a key: its first pointer, which is never nil in a
// map, and the others, if any (nil if none; a slice that is never
// changed once stored).
type Val[E any] struct {
	First *E
	Rest  *[]*E
}

// onode is a key in a line's overflow chain; immutable once published.
type onode[E any] = node[Val[E]]

// line is one cache line of keys: byte j of word is the tag of position
// j (0 if it is free), and its top bit is the forwarding bit.
type line[E any] struct {
	word  atomic.Uint64
	first [width]atomic.Pointer[E]
	over  atomic.Pointer[onode[E]]
}

// table is one generation of lines.
type table[E any] struct {
	lines []line[E]
	locks []lockorder.Mutex // locks[i/lockSpan] guards writes to line i
	shift uint8             // line of hash h: h >> shift
	// next is the table being filled from this one; set before the first
	// line is forwarded, then never changed.
	next unsafe.Pointer // *table[E], loaded and stored atomically
}

func newTable[E any](n int) *table[E] {
	return &table[E]{
		lines: make([]line[E], n),
		locks: make([]lockorder.Mutex, (n+lockSpan-1)/lockSpan),
		shift: uint8(64 - bits.TrailingZeros(uint(n))),
	}
}

// tagOf returns the tag of hash h: a set top bit, so that no tag is a
// free position's 0, over the seven lowest bits of h, which no table uses
// to pick a line (that would take 2^57 lines). Being the same in every
// table, it costs Probe no load of the table's shift, which kept Probe
// from inlining; the callers' hashes mix their low bits as well as their
// high ones.
func tagOf(h uint64) uint64 { return 0x80 | h&0x7f }

// successor returns the table being filled from t, nil if none.
func (t *table[E]) successor() *table[E] { return (*table[E])(atomic.LoadPointer(&t.next)) }

func (t *table[E]) lock(i uint64) *lockorder.Mutex { return &t.locks[i/lockSpan] }

// matches returns a mask with the high bit of byte j set for each position
// j whose tag in word w may be tag: exactly those that are, and maybe a
// few more above one that is, which the key check rejects.
func matches(w, tag uint64) uint64 {
	x := w ^ tag*lo6
	return (x - lo6) &^ x & hi6
}

// Map maps keys to values whose first pointer names the key. The zero Map
// is not usable: call New.
type Map[K any, E any] struct {
	// Read by lookups, written only when a resize publishes a table.
	tab  unsafe.Pointer // *table[E], through cur and publish
	is   func(*E, K) bool
	hash func(*E) uint64

	// Written by every insert and delete: a cache line away from tab, so
	// that a writer does not take the line that every lookup loads first
	// from the readers' caches: beside a goroutine binding and closing
	// sockets on another port, lookups are measurably faster with count
	// apart than beside tab (BenchmarkLookupBesideWriter in demux).
	_        [64]byte
	count    atomic.Int64
	resizing lockorder.Mutex // held by the one writer that resizes
}

// New returns an empty map. is reports whether the key of a value whose
// first pointer is e is k, and hash returns that key's hash, the one its
// writers and readers pass: positions keep no hash, and a resize asks for
// it. is runs on every value whose tag matched (one in 128 of the others
// in a line), so it should compare what tells keys apart, field by field.
func newMap[K any, E any](is func(e *E, k K) bool, hash func(e *E) uint64) *Map[K, E] {
	m := &Map[K, E]{is: is, hash: hash}
	m.publish(newTable[E](minLines))
	return m
}

// cur returns the current table. The tables are linked by unsafe.Pointers
// loaded atomically rather than by atomic.Pointer[table[E]]s, whose
// generic Load takes a dictionary in shaped code: that made Probe too
// costly to inline.
func (m *Map[K, E]) cur() *table[E] { return (*table[E])(atomic.LoadPointer(&m.tab)) }

// publish makes t the current table.
func (m *Map[K, E]) publish(t *table[E]) { atomic.StorePointer(&m.tab, unsafe.Pointer(t)) }

// Len returns the number of keys.
func (m *Map[K, E]) Len() int { return int(m.count.Load()) }

// Slots returns the number of positions of the current table.
func (m *Map[K, E]) Slots() int { return len(m.cur().lines) * width }

// Probe is the line that holds a key's hash as a reader found it.
type Probe[K any, E any] struct {
	l    *line[E]
	word uint64
	tag  uint64
	is   func(*E, K) bool
}

// Probe returns the line for hash h: the first half of Get, which loads
// the line. A caller that checks keys itself scans it with Tagged and At,
// as Get does with the map's key function, then calls Chained.
func (m *Map[K, E]) Probe(h uint64) Probe[K, E] {
	t := m.cur()
	for {
		l := &t.lines[h>>(t.shift&63)] // shift ≤ 63 (two lines at least); &63 spares the guard
		if w := l.word.Load(); w&fwd == 0 {
			return Probe[K, E]{l: l, word: w, tag: tagOf(h), is: m.is}
		}
		t = t.successor()
	}
}

// Tagged returns the positions of p's line whose tag may be the key's:
// the high bit of byte j is set for position j. Scan them with At, then
// call Chained: a caller that checks keys itself, inline, spares Get's
// call of the map's key function.
func (p Probe[K, E]) Tagged() uint64 { return matches(p.word, p.tag) }

// At returns the first pointer in the position of the lowest bit set in
// b, a mask from Tagged; nil if the position was emptied since.
func (p Probe[K, E]) At(b uint64) *E { return p.l.first[bits.TrailingZeros64(b)>>3].Load() }

// Chained returns the value of key k, whose hash is h, in the overflow
// chain of p's line, which Get searches after the positions.
func (p Probe[K, E]) Chained(h uint64, k K) (Val[E], bool) {
	for n := p.l.over.Load(); n != nil; n = n.Next {
		if n.Hash == h && p.is(n.Val.First, k) {
			return n.Val, true
		}
	}
	return Val[E]{}, false
}

// Guess stores in es[i], for each hash hs[i], the first pointer of the
// value a Get of that hash most likely finds, or nil: that of the first
// position of its line whose tag matches, else that of the first node of
// the line's chain with its hash. It checks no key and decides nothing. A
// batch calls it, then reads each pointer it got, before its lookups, so
// that the cache misses of the lines, then of the chains, then of the
// values overlap: it loads every line before it reads any, in a loop kept
// short, since a loop whose iterations each do more fills the processor's
// window of outstanding instructions with few misses. A resize under way
// can make a guess stale, never a lookup wrong. es must be as long as hs.
func (m *Map[K, E]) Guess(hs []uint64, es []*E) {
	t := m.cur()
	var (
		words [64]uint64
		heads [64]*onode[E]
	)
	for len(hs) > 0 {
		n := min(len(hs), len(words))
		for i, h := range hs[:n] {
			words[i] = t.lines[h>>t.shift].word.Load()
		}
		chained := false
		for i, h := range hs[:n] {
			l := &t.lines[h>>t.shift]
			es[i], heads[i] = nil, nil
			if b := matches(words[i], tagOf(h)); b != 0 {
				es[i] = l.first[bits.TrailingZeros64(b)>>3].Load()
			} else if heads[i] = l.over.Load(); heads[i] != nil {
				chained = true
			}
		}
		if chained {
			for i, h := range hs[:n] {
				for o := heads[i]; o != nil; o = o.Next {
					if o.Hash == h {
						es[i] = o.Val.First
						break
					}
				}
			}
		}
		hs, es = hs[n:], es[n:]
	}
}

// Get returns the value of key k, whose hash is h. It takes no lock, and
// the value it returns was k's at some moment during the call.
func (m *Map[K, E]) Get(h uint64, k K) (Val[E], bool) {
	p := m.Probe(h)
	for b := p.Tagged(); b != 0; b &= b - 1 {
		if e := p.At(b); e != nil && p.is(e, k) {
			return Val[E]{First: e}, true
		}
	}
	return p.Chained(h, k)
}

// Update sets the value of key k, whose hash is h, to what f returns
// given its present value (ok reports whether there is one): keep false
// deletes the key; a value kept must have a First that names k. f runs
// with the key's line locked and must not call the map. Update may then
// resize the map, which costs the caller O(keys). It takes its locks
// through o, the Guard of the caller's write (nil: unchecked).
func (m *Map[K, E]) Update(o *lockorder.Guard, h uint64, k K, f func(old Val[E], ok bool) (v Val[E], keep bool)) {
	t := m.cur()
	for {
		i := h >> t.shift
		mu := t.lock(i)
		o.Locking(lockorder.Line, mu).Lock()
		l := &t.lines[i]
		w := l.word.Load()
		if w&fwd != 0 {
			o.Unlocking(lockorder.Line, mu).Unlock()
			t = t.successor()
			continue
		}
		m.count.Add(update(l, w, tagOf(h), h, k, m.is, f))
		o.Unlocking(lockorder.Line, mu).Unlock()
		m.maybeResize(o)
		return
	}
}

// update is Update in line l, whose word is w, for a key whose tag is tag;
// it returns the change in the number of keys.
func update[K any, E any](l *line[E], w, tag, h uint64, k K, is func(*E, K) bool,
	f func(Val[E], bool) (Val[E], bool)) int64 {
	pos := -1
	for b := matches(w, tag); b != 0; b &= b - 1 {
		j := bits.TrailingZeros64(b) >> 3
		if w>>(8*j)&0xff == tag && is(l.first[j].Load(), k) {
			pos = j
			break
		}
	}
	head := l.over.Load()
	var on *onode[E]
	if pos < 0 {
		for n := head; n != nil; n = n.Next {
			if n.Hash == h && is(n.Val.First, k) {
				on = n
				break
			}
		}
	}
	var old Val[E]
	switch {
	case pos >= 0:
		old.First = l.first[pos].Load()
	case on != nil:
		old = on.Val
	}
	v, keep := f(old, pos >= 0 || on != nil)
	switch {
	case pos >= 0 && keep && v.Rest == nil:
		l.first[pos].Store(v.First)
	case pos >= 0:
		if keep {
			// More pointers: to the chain, published before the tag
			// goes.
			l.over.Store(&onode[E]{Hash: h, Next: head, Val: v})
		}
		l.word.Store(w &^ (0xff << (8 * pos)))
		l.first[pos].Store(nil)
		if !keep {
			return -1
		}
	case on != nil && keep:
		l.over.Store(replace(head, on, &onode[E]{Hash: h, Val: v}))
	case on != nil:
		l.over.Store(replace(head, on, nil))
		return -1
	case keep:
		add(l, w, tag, h, v)
		return 1
	}
	return 0
}

// add puts a new key in line l, whose word is w: in a free position if its
// value has no more pointers and the line has one, else in the chain.
func add[E any](l *line[E], w, tag, h uint64, v Val[E]) {
	if v.Rest == nil {
		for j := range width {
			if w>>(8*j)&0xff == 0 {
				l.first[j].Store(v.First)
				l.word.Store(w | tag<<(8*j))
				return
			}
		}
	}
	l.over.Store(&onode[E]{Hash: h, Next: l.over.Load(), Val: v})
}

// maybeResize grows the table past maxLoad keys a line on average, and
// shrinks it below one key per two lines, unless another writer is
// resizing.
func (m *Map[K, E]) maybeResize(o *lockorder.Guard) {
	// need returns the lines t should have instead, or 0.
	need := func(t *table[E]) int {
		n, lines := m.count.Load(), int64(len(t.lines))
		switch {
		case n > maxLoad*lines:
			return 2 * len(t.lines)
		case 2*n < lines && lines > minLines:
			return len(t.lines) / 2
		}
		return 0
	}
	if need(m.cur()) == 0 || !o.TryLockResize(&m.resizing) {
		return
	}
	defer func() { o.Unlocking(lockorder.Resize, &m.resizing).Unlock() }()
	t := m.cur()
	if n := need(t); n != 0 {
		m.resize(o, t, n)
	}
}

// resize moves every line of t into a table of n lines, twice or half as
// many: a line feeds two lines of a larger table, and a pair of lines
// (which share a lock) feeds one line of a smaller one.
func (m *Map[K, E]) resize(o *lockorder.Guard, t *table[E], n int) {
	nt := newTable[E](n)
	atomic.StorePointer(&t.next, unsafe.Pointer(nt))
	step := uint64(1)
	if n < len(t.lines) {
		step = 2
	}
	for i := uint64(0); i < uint64(len(t.lines)); i += step {
		mu := t.lock(i)
		o.Locking(lockorder.Line, mu).Lock()
		for s := i; s < i+step; s++ {
			l := &t.lines[s]
			w := l.word.Load()
			for j := range width {
				if w>>(8*j)&0xff != 0 {
					e := l.first[j].Load()
					nt.put(m.hash(e), Val[E]{First: e})
				}
			}
			for x := l.over.Load(); x != nil; x = x.Next {
				nt.put(x.Hash, x.Val)
			}
		}
		for s := i; s < i+step; s++ {
			l := &t.lines[s]
			l.word.Store(l.word.Load() | fwd)
		}
		o.Unlocking(lockorder.Line, mu).Unlock()
	}
	m.publish(nt)
}

// put adds a key of hash h to t while no reader can reach its line.
func (t *table[E]) put(h uint64, v Val[E]) {
	l := &t.lines[h>>t.shift]
	add(l, l.word.Load(), tagOf(h), h, v)
}

// All calls f for every value, line by line, until f returns false. A key
// that is present throughout is seen exactly once; one added or removed
// meanwhile may or may not be.
func (m *Map[K, E]) All(f func(Val[E]) bool) {
	t := m.cur()
	for i := range len(t.lines) {
		if !m.walk(t, uint64(i), t.shift, uint64(i), f) {
			return
		}
	}
}

// walk visits the keys of line i of t whose hashes h have h>>shift == want
// (the line they had in the table All started from), following forwarded
// lines into successors: after a grow a line's keys are in two lines,
// after a shrink in one line shared with its sibling's keys.
func (m *Map[K, E]) walk(t *table[E], i uint64, shift uint8, want uint64, f func(Val[E]) bool) bool {
	l := &t.lines[i]
	w := l.word.Load()
	if w&fwd != 0 {
		nt := t.successor()
		if len(nt.lines) > len(t.lines) {
			return m.walk(nt, 2*i, shift, want, f) && m.walk(nt, 2*i+1, shift, want, f)
		}
		return m.walk(nt, i/2, shift, want, f)
	}
	for j := range width {
		if w>>(8*j)&0xff == 0 {
			continue
		}
		if e := l.first[j].Load(); e != nil && m.hash(e)>>shift == want && !f(Val[E]{First: e}) {
			return false
		}
	}
	for x := l.over.Load(); x != nil; x = x.Next {
		if x.Hash>>shift == want && !f(x.Val) {
			return false
		}
	}
	return true
}

// Check returns an error if the current table breaks an invariant: a key
// in a line its hash does not pick, a tag that is not its key's, a free
// position that holds a pointer, a position that holds a value with more
// pointers, a first pointer held twice (a key kept in two places), a
// forwarded line, or a count that is not the keys'. Call it when no write
// is in flight.
func (m *Map[K, E]) Check() error {
	t := m.cur()
	var n int64
	seen := map[*E]bool{}
	once := func(e *E) bool {
		first := !seen[e]
		seen[e] = true
		return first
	}
	for i := range t.lines {
		l := &t.lines[i]
		w := l.word.Load()
		if w&fwd != 0 {
			return fmt.Errorf("line %d of the current table is forwarded", i)
		}
		if w>>(8*width)&0xff != 0 {
			return fmt.Errorf("line %d: word %#x has bits past its tags", i, w)
		}
		for j := range width {
			e, tg := l.first[j].Load(), w>>(8*j)&0xff
			switch {
			case tg == 0 && e != nil:
				return fmt.Errorf("line %d: free position %d holds a value", i, j)
			case tg == 0:
			case e == nil:
				return fmt.Errorf("line %d: position %d is tagged and empty", i, j)
			case m.hash(e)>>t.shift != uint64(i) || tagOf(m.hash(e)) != tg:
				return fmt.Errorf("line %d: position %d's key or tag is not its hash's", i, j)
			case !once(e):
				return fmt.Errorf("line %d: position %d holds a value held elsewhere too", i, j)
			default:
				n++
			}
		}
		for x := l.over.Load(); x != nil; x = x.Next {
			if x.Val.First == nil || m.hash(x.Val.First) != x.Hash || x.Hash>>t.shift != uint64(i) {
				return fmt.Errorf("line %d: an overflow node's hash is not its key's, or its line", i)
			}
			if !once(x.Val.First) {
				return fmt.Errorf("line %d: an overflow node holds a value held elsewhere too", i)
			}
			n++
		}
	}
	if c := m.count.Load(); c != n {
		return fmt.Errorf("%d keys counted, %d in the lines", c, n)
	}
	return nil
}
