package cow

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// chain builds a chain of the values vs, first to last.
func chain(vs ...int) *Node[int] {
	var head *Node[int]
	for i := len(vs) - 1; i >= 0; i-- {
		head = &Node[int]{Hash: uint64(vs[i]), Next: head, Val: vs[i]}
	}
	return head
}

func values(n *Node[int]) []int {
	var vs []int
	for ; n != nil; n = n.Next {
		vs = append(vs, n.Val)
	}
	return vs
}

func at(n *Node[int], i int) *Node[int] {
	for ; i > 0; i-- {
		n = n.Next
	}
	return n
}

// TestReplace: replacing or removing any node gives the chain with that
// change, leaves the old chain as it was (a reader may be walking it),
// and shares the nodes after the changed one.
func TestReplace(t *testing.T) {
	cases := []struct {
		name string
		at   int
		with *int // nil: remove
		want []int
	}{
		{"remove head", 0, nil, []int{2, 3, 4}},
		{"remove middle", 2, nil, []int{1, 2, 4}},
		{"remove tail", 3, nil, []int{1, 2, 3}},
		{"replace head", 0, new(9), []int{9, 2, 3, 4}},
		{"replace middle", 1, new(9), []int{1, 9, 3, 4}},
		{"replace tail", 3, new(9), []int{1, 2, 3, 9}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			head := chain(1, 2, 3, 4)
			old := at(head, c.at)
			var n *Node[int]
			if c.with != nil {
				n = &Node[int]{Hash: uint64(*c.with), Val: *c.with}
			}
			got := Replace(head, old, n)
			assert.Equal(t, c.want, values(got))
			assert.Equal(t, []int{1, 2, 3, 4}, values(head), "the old chain changed")
			if old.Next != nil {
				assert.Same(t, old.Next, at(got, c.at+1-boolInt(c.with == nil)), "the tail is not shared")
			}
			for i := range c.at {
				assert.NotSame(t, at(head, i), at(got, i), "a node ahead of the change was not copied")
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
