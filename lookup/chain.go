package lookup

import "sync/atomic"

// Chain is a singly linked list for lock-free readers and locked writers,
// in the manner of the kernel's hlist RCU lists: writers publish each change
// with one atomic store, a removed node keeps its Next so a reader standing
// on it carries on, and the garbage collector stands in for the grace period.
// A node is only ever linked into the chain it was made for; a socket that
// moves gets new nodes, so readers never wander into another chain.
type Chain struct {
	head atomic.Pointer[Node]
	// count is the number of nodes, with markBit beside it: one load
	// gives a lookup both.
	count atomic.Int32
	// Seq counts moves between secondary chains (a growing table's port
	// chain counts moves between its indexes; a fixed table's primary
	// chain does not use it). It fills what would be padding: a chain is
	// 16 bytes.
	Seq SeqCount
}

// First returns the first node, or nil.
func (c *Chain) First() *Node { return c.head.Load() }

// markBit is the mark's bit in count, far above any length.
const markBit = 1 << 30

// Len returns the number of nodes.
func (c *Chain) Len() int { return int(c.count.Load() &^ markBit) }

// LenMarked returns the number of nodes and the mark, read together.
func (c *Chain) LenMarked() (n int, marked bool) {
	x := c.count.Load()
	return int(x &^ markBit), x&markBit != 0
}

// SetMark sets or clears the mark: one bit that the chain's owner gives a
// meaning to, and lookups read with the length. The caller holds the
// chain's lock.
func (c *Chain) SetMark(on bool) {
	if on {
		c.count.Or(markBit)
	} else {
		c.count.And(^markBit)
	}
}

// PushFront links n at the head. The caller holds the chain's lock.
func (c *Chain) PushFront(n *Node) {
	first := c.head.Load()
	n.Prev = nil
	n.Next.Store(first)
	if first != nil {
		first.Prev = n
	}
	c.head.Store(n)
	c.count.Add(1)
}

// Remove unlinks n. The caller holds the chain's lock. n keeps its Next so
// that a concurrent reader on n still reaches the rest of the chain.
func (c *Chain) Remove(n *Node) {
	next := n.Next.Load()
	if n.Prev == nil {
		c.head.Store(next)
	} else {
		n.Prev.Next.Store(next)
	}
	if next != nil {
		next.Prev = n.Prev
	}
	n.Prev = nil
	c.count.Add(-1)
}

// Replace puts n where old is, in one atomic store. The caller holds the
// chain's lock.
func (c *Chain) Replace(old, n *Node) {
	next := old.Next.Load()
	n.Prev = old.Prev
	n.Next.Store(next)
	if next != nil {
		next.Prev = n
	}
	if old.Prev == nil {
		c.head.Store(n)
	} else {
		old.Prev.Next.Store(n)
	}
	old.Prev = nil
}
