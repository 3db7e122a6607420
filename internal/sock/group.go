package sock

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

// SetSelector sets the group's selector; nil removes it.
func (g *Group) SetSelector(s Selector) {
	if s == nil {
		g.sel.Store(nil)
		return
	}
	g.sel.Store(&s)
}

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
		panic("sock: View index out of range")
	}
	return v.m.es[i].Load()
}

// Ref returns the i-th member's Ref, 0 ≤ i < v.Len(): what a lookup
// returns, read from the group's array, and from the member's entry only
// while a writer rewrites the slot.
func (v View) Ref(i int) Ref {
	if uint(i) >= uint(v.n) {
		panic("sock: View index out of range")
	}
	c := &v.m.refs[i]
	if q := c.seq.Load(); q&1 == 0 {
		r := Ref{Sock: c.sock.Load(), Ptr: atomic.LoadPointer(&c.ptr), Word: c.word.Load()}
		if c.seq.Load() == q {
			return r
		}
	}
	// A writer is moving a member into slot i: rather than wait for it,
	// read the Ref in the entry, which is one of the slot's moments.
	return v.m.es[i].Load().Ref
}

// Snapshot returns a View of a copy of the members, which later joins
// and leaves leave alone. It copies the array of one moment.
func (g *Group) Snapshot() View {
	m := g.arr.Load()
	if m == nil {
		return View{}
	}
	n := int(m.n.Load())
	c := newMembers(n)
	for i := range n {
		c.set(i, m.es[i].Load())
	}
	c.n.Store(int32(n))
	return View{m: c, n: n}
}

// members is one array of a group. Writers grow it by copying into a new
// one; readers that still hold an old one see the members of that moment.
// refs[i] is a copy of es[i].Ref: a pick reads it in a dense array, not
// in the member's entry, which is large and scattered, nor behind a
// pointer, which costs a second dependent miss (see DESIGN.md, SO_REUSEPORT
// groups, for what that cost a lookup). A reader may see the two of a
// slot from different moments, each of them a member of its moment.
type members struct {
	n    atomic.Int32
	es   []atomic.Pointer[Entry]
	refs []refCell
}

// refCell is a Ref that lookups read while writers may rewrite it. seq is
// odd while a writer stores the three words, and grows by two with each
// rewrite, so that a reader who saw the same even seq before and after
// its loads read one Ref whole; 32 bytes, two cells a cache line.
type refCell struct {
	seq  atomic.Uint64
	sock atomic.Pointer[Socket]
	ptr  unsafe.Pointer // read and written with atomic.LoadPointer and StorePointer
	word atomic.Uint64
}

func newMembers(n int) *members {
	return &members{es: make([]atomic.Pointer[Entry], n), refs: make([]refCell, n)}
}

// set stores e, with a copy of its Ref, in slot i. The caller holds the
// group's write lock.
func (m *members) set(i int, e *Entry) {
	m.es[i].Store(e)
	c := &m.refs[i]
	c.seq.Add(1)
	c.sock.Store(e.Ref.Sock)
	atomic.StorePointer(&c.ptr, e.Ref.Ptr)
	c.word.Store(e.Ref.Word)
	c.seq.Add(1)
}

// Len returns the number of members.
func (g *Group) Len() int {
	if m := g.arr.Load(); m != nil {
		return int(m.n.Load())
	}
	return 0
}

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
	m := g.arr.Load()
	var n int32
	if m != nil {
		n = m.n.Load()
	}
	if m == nil || int(n) == len(m.es) {
		grown := newMembers(max(4, 2*int(n)))
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
