package sock

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// groupOf returns a group of n members whose Refs say which member they
// are: member k's Sock is &socks[k] and its Word is k.
func groupOf(n int) (*Group, []*Entry, []Socket) {
	socks := make([]Socket, n)
	es := make([]*Entry, n)
	g := new(Group)
	for k := range es {
		es[k] = &Entry{Face: Face{Ref: Ref{Sock: &socks[k], Word: uint64(k)}}}
		g.Add(es[k])
	}
	return g, es, socks
}

// TestGroupRefs checks what a pick reads against the entries, through
// joins, leaves (the last member taking the leaver's place) and growth.
func TestGroupRefs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		remove []int // members to remove, in order
		want   []int // the members left, in the group's order
	}{
		{name: "joins past the first array", n: 9, want: []int{0, 1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "the last takes a leaver's place", n: 5, remove: []int{1}, want: []int{0, 4, 2, 3}},
		{name: "the last leaves", n: 3, remove: []int{2}, want: []int{0, 1}},
		{name: "all leave", n: 2, remove: []int{0, 1}, want: []int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, es, _ := groupOf(tc.n)
			for _, k := range tc.remove {
				g.Remove(es[k])
			}
			v := g.View()
			require.Equal(t, len(tc.want), v.Len())
			snap := g.Snapshot()
			for i, k := range tc.want {
				require.Same(t, es[k], v.At(i), "member %d", i)
				require.Equal(t, es[k].Ref, v.Ref(i), "member %d", i)
				require.Equal(t, es[k].Ref, snap.Ref(i), "snapshot member %d", i)
			}
		})
	}
}

// TestGroupRefWhole checks that a pick never reads a Ref torn between two
// members while a writer moves members in and out of the slot it reads:
// member k's Word must come with member k's Sock. A pick that took the
// words of a slot without checking its sequence count would mix them.
func TestGroupRefWhole(t *testing.T) {
	const writes = 200000
	g, es, socks := groupOf(3)
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		// Removing member 0 moves the last member into slot 0; adding it
		// again appends it: slot 0 alternates between two members.
		for range writes {
			g.Remove(es[0])
			g.Add(es[0])
			es[0], es[2] = es[2], es[0]
		}
	}()
	torn, reads := 0, 0
	for !done.Load() {
		v := g.View()
		for i := range v.Len() {
			r := v.Ref(i)
			reads++
			if r.Sock != &socks[r.Word] {
				torn++
			}
		}
	}
	wg.Wait()
	require.Zero(t, torn, "Refs torn in %d reads", reads)
	require.NotZero(t, reads)
}
