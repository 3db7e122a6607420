package grow

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// chain builds a chain of the values vs, first to last.
func cowChain(vs ...int) *node[int] {
	var head *node[int]
	for i := len(vs) - 1; i >= 0; i-- {
		head = &node[int]{Hash: uint64(vs[i]), Next: head, Val: vs[i]}
	}
	return head
}

func cowValues(n *node[int]) []int {
	var vs []int
	for ; n != nil; n = n.Next {
		vs = append(vs, n.Val)
	}
	return vs
}

func cowAt(n *node[int], i int) *node[int] {
	for ; i > 0; i-- {
		n = n.Next
	}
	return n
}

// TestCowReplace: replacing or removing any node gives the chain with that
// change, leaves the old chain as it was (a reader may be walking it),
// and shares the nodes after the changed one.
func TestCowReplace(t *testing.T) {
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
			head := cowChain(1, 2, 3, 4)
			old := cowAt(head, c.at)
			var n *node[int]
			if c.with != nil {
				n = &node[int]{Hash: uint64(*c.with), Val: *c.with}
			}
			got := replace(head, old, n)
			assert.Equal(t, c.want, cowValues(got))
			assert.Equal(t, []int{1, 2, 3, 4}, cowValues(head), "the old chain changed")
			if old.Next != nil {
				assert.Same(t, old.Next, cowAt(got, c.at+1-boolInt(c.with == nil)), "the tail is not shared")
			}
			for i := range c.at {
				assert.NotSame(t, cowAt(head, i), cowAt(got, i), "a node ahead of the change was not copied")
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
