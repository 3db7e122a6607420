package grow

// The overflow chains are immutable: nodes that never change once
// published, so that a lookup walks a consistent chain without a lock,
// and writers that publish a changed chain with one atomic store.

// node is one key of a chain: its hash, the next node and the value, which
// names the key. It must not change once a reader can reach it.
type node[V any] struct {
	Hash uint64
	Next *node[V]
	Val  V
}

// replace returns the chain from head with old replaced by n (removed if n
// is nil), copying the nodes ahead of old and sharing those after it, so
// that a reader of the old chain still sees it whole. n must be
// unpublished; old must be in the chain.
func replace[V any](head, old, n *node[V]) *node[V] {
	rest := old.Next
	if n != nil {
		n.Next = rest
		rest = n
	}
	if head == old {
		return rest
	}
	first := &node[V]{Hash: head.Hash, Val: head.Val}
	last := first
	for x := head.Next; x != old; x = x.Next {
		c := &node[V]{Hash: x.Hash, Val: x.Val}
		last.Next = c
		last = c
	}
	last.Next = rest
	return first
}
