package lookup

import (
	"sync/atomic"
	"unsafe"
)

// Group is an SO_REUSEPORT group: unconnected ReusePort entries with the
// same address, port, device, family, V6Only and owner. Its members sit in
// an array in Linux's order (reuse->socks): a new member goes at the end,
// and a leaving member's place is taken by the last one, so that joining
// and leaving cost O(1) however large the group. A lookup picks a member
// from the array without a lock.
type Group struct {
	arr atomic.Pointer[members]
	// ver is odd while a join or leave is under way, and grows by two
	// with each: a snapshot that saw the same even ver before and after
	// its copy copied the members of one moment. A leave rewrites a slot
	// and then the count, and a copy made across the two lists the last
	// member twice.
	ver atomic.Uint64
	// pos is each member's index in arr. Guarded by the primary slot lock
	// of the group's port, like every write to the group.
	pos map[*Entry]int
	sel atomic.Pointer[Selector]
}

// Flow is the addressing of a datagram that a group receives, and its flow
// hash, as a Selector sees it.
type Flow struct {
	Src, Dst         Addr16 // IPv4 in v4-mapped form
	SrcPort, DstPort uint16
	Ifindex          int32
	Is4              bool
	Hash             uint32
	Payload          []byte // nil unless the lookup's caller had it
}

// Selector picks the index in members of the member that receives f, or
// declines with an index out of range.
type Selector func(f Flow, members View) int

// Selector returns the group's selector, or nil.
func (g *Group) Selector() Selector {
	if p := g.sel.Load(); p != nil {
		return *p
	}
	return nil
}

// SetSelector sets the group's selector; nil removes it (Selector then
// reads nil through the pointer).
func (g *Group) SetSelector(s Selector) { g.sel.Store(&s) }

// View is the members of a group as a lookup sees them: the array of one
// moment, with its length then. A member that leaves later may be
// replaced in place by the last one, as when Linux's BPF program reads
// reuse->socks.
type View struct {
	m *members
	n int
}

// View returns the group's members now, without a copy.
func (g *Group) View() View {
	m := g.arr.Load()
	if m == nil {
		return View{}
	}
	return View{m: m, n: int(m.n.Load())}
}

// Len returns the number of members in v.
func (v View) Len() int { return v.n }

// At returns the i-th member, 0 ≤ i < v.Len().
func (v View) At(i int) *Entry {
	if uint(i) >= uint(v.n) {
		panic("lookup: View index out of range")
	}
	return v.m.es[i].Load()
}

// Ref returns the i-th member's Ref, 0 ≤ i < v.Len(): what a lookup
// returns, read from the group's array, and from the member's entry only
// while a writer rewrites a slot or when the array keeps no cells.
func (v View) Ref(i int) Ref {
	if uint(i) >= uint(v.n) {
		panic("lookup: View index out of range")
	}
	m := v.m
	if q := m.seq.Load(); q&1 == 0 {
		var r Ref
		switch {
		case m.words != nil:
			c := &m.words[i]
			r = Ref{Sock: c.sock.Load(), Word: c.word.Load()}
		case m.ptrs != nil:
			c := &m.ptrs[i]
			r = Ref{Sock: c.sock.Load(), Ptr: atomic.LoadPointer(&c.ptr)}
		}
		if r.Sock != nil && m.seq.Load() == q {
			return r
		}
	}
	// A writer is moving a member into some slot, or the members' Refs
	// fit no cell: rather than wait, read the Ref in the entry, which is
	// one of the slot's moments.
	return m.es[i].Load().Ref
}

// ReadTries bounds the lock-free attempts of a read that starts over
// when a writer changed what it read meanwhile: a snapshot of a group, a
// lookup or multicast search that met a move. A reader that reaches it
// takes the lock of the port it reads, which keeps writers out for one
// attempt, so that a writer that never stops cannot starve it.
const ReadTries = 4

// Snapshot returns a View of a copy of the members of one moment of the
// call, each once, in the group's order then; later joins and leaves
// leave it alone. It reports false, with nothing copied, if joins and
// leaves overlapped each of its ReadTries attempts: the caller then takes
// the lock of the group's port and calls SnapshotLocked.
func (g *Group) Snapshot() (View, bool) {
	for range ReadTries {
		v := g.ver.Load()
		if v&1 != 0 {
			spin()
			continue
		}
		c := g.copyMembers()
		if g.ver.Load() == v {
			return c, true
		}
	}
	return View{}, false
}

// SnapshotLocked is Snapshot for a caller that holds the primary slot
// lock of the group's port, under which no member joins or leaves.
func (g *Group) SnapshotLocked() View { return g.copyMembers() }

// copyMembers copies the array as it reads it, slot by slot: the members
// of one moment only if no join or leave overlaps it.
func (g *Group) copyMembers() View {
	m := g.arr.Load()
	if m == nil {
		return View{}
	}
	n := int(m.n.Load())
	c := newMembers(n, m.kind())
	for i := range n {
		c.set(i, m.es[i].Load())
	}
	c.n.Store(int32(n))
	return View{m: c, n: n}
}

// members is one array of a group. Writers grow it by copying into a new
// one; readers that still hold an old one see the members of that moment.
//
// Beside the entries are cells with a copy of each member's Ref: a pick
// reads its cell in a dense array, not the member's entry, which is large
// and scattered, nor a copy behind a pointer, which costs a second
// dependent miss (DESIGN.md, SO_REUSEPORT groups, names the benchmark that
// measures the cells). A cell is 16 bytes, the socket and the one word of
// the Ref that its table uses: a Ref keeps its value in Word or in Ptr, never
// both (see package demux). words holds the cells while no member's Ptr is set,
// ptrs while no member's Word is; an array whose members need both keeps
// no cells, and its picks read the entries. Exactly one of words and ptrs
// is non-nil, or neither.
//
// seq is odd while a writer rewrites a cell, and grows by two with each
// rewrite, so that a reader who saw the same even seq before and after its
// loads read one Ref whole. One count for the array, not one per cell,
// keeps a cell at 16 bytes; a pick that meets a writer reads the entry.
type members struct {
	n     atomic.Int32
	seq   atomic.Uint64
	es    []atomic.Pointer[Entry]
	words []wordCell
	ptrs  []ptrCell
}

// wordCell is the Ref of a member whose Ptr is nil.
type wordCell struct {
	sock atomic.Pointer[Socket]
	word atomic.Uint64
}

// ptrCell is the Ref of a member whose Word is 0.
type ptrCell struct {
	sock atomic.Pointer[Socket]
	ptr  unsafe.Pointer // read and written with atomic.LoadPointer and StorePointer
}

// cellKind says which cells an array keeps.
type cellKind uint8

const (
	wordCells cellKind = iota // words: no member's Ptr is set
	ptrCells                  // ptrs: no member's Word is set
	noCells                   // members need both: picks read the entries
)

// fits reports whether r can live in a cell of kind k.
func (k cellKind) fits(r Ref) bool {
	switch k {
	case wordCells:
		return r.Ptr == nil
	case ptrCells:
		return r.Word == 0
	}
	return true
}

// kindFor returns the cell kind that holds every Ref in es[:n] and r.
func kindFor(es []atomic.Pointer[Entry], n int, r Ref) cellKind {
	ptr, word := r.Ptr != nil, r.Word != 0
	for i := range n {
		e := es[i].Load()
		ptr = ptr || e.Ref.Ptr != nil
		word = word || e.Ref.Word != 0
	}
	switch {
	case !ptr:
		return wordCells
	case !word:
		return ptrCells
	}
	return noCells
}

func newMembers(n int, k cellKind) *members {
	m := &members{es: make([]atomic.Pointer[Entry], n)}
	switch k {
	case wordCells:
		m.words = make([]wordCell, n)
	case ptrCells:
		m.ptrs = make([]ptrCell, n)
	}
	return m
}

// kind returns the kind of m's cells.
func (m *members) kind() cellKind {
	switch {
	case m.words != nil:
		return wordCells
	case m.ptrs != nil:
		return ptrCells
	}
	return noCells
}

// set stores e, with a copy of its Ref, in slot i. The caller holds the
// group's write lock, and e's Ref fits m's cells.
func (m *members) set(i int, e *Entry) {
	m.es[i].Store(e)
	m.seq.Add(1)
	switch {
	case m.words != nil:
		c := &m.words[i]
		c.sock.Store(e.Ref.Sock)
		c.word.Store(e.Ref.Word)
	case m.ptrs != nil:
		c := &m.ptrs[i]
		c.sock.Store(e.Ref.Sock)
		atomic.StorePointer(&c.ptr, e.Ref.Ptr)
	}
	m.seq.Add(1)
}

// Len returns the number of members.
func (g *Group) Len() int { return g.View().Len() }

// Members returns a copy of the members in the group's order.
func (g *Group) Members() []*Entry {
	m := g.arr.Load()
	if m == nil {
		return nil
	}
	out := make([]*Entry, m.n.Load())
	for i := range out {
		out[i] = m.es[i].Load()
	}
	return out
}

// Add appends e. The caller holds the primary slot lock of the group's port.
func (g *Group) Add(e *Entry) {
	g.ver.Add(1)
	defer g.ver.Add(1)
	m := g.arr.Load()
	var n int32
	if m != nil {
		n = m.n.Load()
	}
	if m == nil || int(n) == len(m.es) || !m.kind().fits(e.Ref) {
		// A new array, larger if this one is full, with cells that fit
		// e's Ref too: readers of the old one keep its moment.
		size, k := 4, wordCells
		var old []atomic.Pointer[Entry]
		if m != nil {
			size, k, old = max(size, len(m.es)), m.kind(), m.es
			if int(n) == len(m.es) {
				size = 2 * int(n)
			}
		}
		if !k.fits(e.Ref) {
			k = kindFor(old, int(n), e.Ref)
		}
		grown := newMembers(size, k)
		for i := range int(n) {
			grown.set(i, m.es[i].Load())
		}
		grown.n.Store(n)
		g.arr.Store(grown)
		m = grown
	}
	if g.pos == nil {
		g.pos = map[*Entry]int{}
	}
	g.pos[e] = int(n)
	m.set(int(n), e)
	m.n.Store(n + 1)
}

// Remove drops e, moving the last member into its place, and reports how
// many members remain. The caller holds the primary slot lock of the
// group's port.
func (g *Group) Remove(e *Entry) int {
	m := g.arr.Load()
	i, ok := g.pos[e]
	if m == nil || !ok {
		return g.Len()
	}
	g.ver.Add(1)
	defer g.ver.Add(1)
	delete(g.pos, e)
	last := m.n.Load() - 1
	if int32(i) != last {
		moved := m.es[last].Load()
		m.set(i, moved)
		g.pos[moved] = i
	}
	// The last slot keeps its pointer: a reader that counted the old
	// length may still read it, and finds a member of that moment.
	m.n.Store(last)
	return int(last)
}

// Verify reports through bad, with where naming the group, every way the
// group's array disagrees with itself: a member's position, a cell that
// differs from its member's Ref or cannot hold it, or a sequence count
// left odd. No write to the group may be in flight.
func (g *Group) Verify(where string, bad func(format string, args ...any)) {
	m := g.arr.Load()
	if m == nil {
		if len(g.pos) != 0 {
			bad("%s: %d positions and no array", where, len(g.pos))
		}
		return
	}
	n := int(m.n.Load())
	if n != len(g.pos) {
		bad("%s: %d members, %d positions", where, n, len(g.pos))
	}
	if m.seq.Load()&1 != 0 {
		bad("%s: sequence count odd with no write in flight", where)
	}
	if g.ver.Load()&1 != 0 {
		bad("%s: version odd with no join or leave in flight", where)
	}
	v, k := View{m: m, n: n}, m.kind()
	for i := range n {
		e := m.es[i].Load()
		if p, ok := g.pos[e]; !ok || p != i {
			bad("%s: member %d is at position %d (%v)", where, i, p, ok)
		}
		if !k.fits(e.Ref) {
			bad("%s: member %d's Ref does not fit the cells", where, i)
		} else if v.Ref(i) != e.Ref {
			bad("%s: member %d's cell differs from its Ref", where, i)
		}
	}
}
