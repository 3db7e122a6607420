package lookup

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// groupOf returns a group of n members whose Refs say which member they
// are: member k's Sock is &socks[k] and its Word is k.
func groupOf(n int) (*Group, []*Entry, []Socket) {
	g, es, socks, _ := groupWith(n, wordRef)
	return g, es, socks
}

// groupWith returns a group of n members whose Refs ref makes from the
// member's socket and number, with the numbers ref may point to.
func groupWith(n int, ref func(s *Socket, k int, vals []int) Ref) (*Group, []*Entry, []Socket, []int) {
	socks := make([]Socket, n)
	vals := make([]int, n)
	es := make([]*Entry, n)
	g := new(Group)
	for k := range es {
		vals[k] = k
		es[k] = &Entry{Face: Face{Ref: ref(&socks[k], k, vals)}}
		g.Add(es[k])
	}
	return g, es, socks, vals
}

// wordRef keeps member k's number in Word, as a table of small values
// does.
func wordRef(s *Socket, k int, _ []int) Ref { return Ref{Sock: s, Word: uint64(k)} }

// ptrRef points Ptr at member k's number, as a table of pointers does.
func ptrRef(s *Socket, k int, vals []int) Ref {
	return Ref{Sock: s, Ptr: unsafe.Pointer(&vals[k])}
}

// member returns the number r says its member has: the int that Ptr
// points to, or else Word.
func member(r Ref) int {
	if r.Ptr != nil {
		return *(*int)(r.Ptr)
	}
	return int(r.Word)
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
			snap, _ := g.Snapshot()
			for i, k := range tc.want {
				require.Same(t, es[k], v.At(i), "member %d", i)
				require.Equal(t, es[k].Ref, v.Ref(i), "member %d", i)
				require.Equal(t, es[k].Ref, snap.Ref(i), "snapshot member %d", i)
			}
		})
	}
}

// TestGroupCells checks which cells an array keeps as its members' Refs
// change: a pick must read every member's Ref whole whichever word its
// table keeps values in, and an array must change its cells, not drop a
// word, when a member needs the other one.
func TestGroupCells(t *testing.T) {
	vals := []int{7, 8, 9}
	for _, tc := range []struct {
		name string
		refs []Ref // the members' Refs, Sock left to the test
		want cellKind
	}{
		{name: "words", refs: []Ref{{Word: 1}, {Word: 0}, {Word: 3}}, want: wordCells},
		{name: "pointers", refs: []Ref{{Ptr: unsafe.Pointer(&vals[0])}, {}, {Ptr: unsafe.Pointer(&vals[1])}}, want: ptrCells},
		{name: "a pointer after empty values", refs: []Ref{{}, {}, {}, {}, {Ptr: unsafe.Pointer(&vals[2])}}, want: ptrCells},
		{name: "a word after pointers", refs: []Ref{{Ptr: unsafe.Pointer(&vals[0])}, {Word: 5}}, want: noCells},
		{name: "both in one Ref", refs: []Ref{{Word: 5}, {Word: 6, Ptr: unsafe.Pointer(&vals[0])}}, want: noCells},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socks := make([]Socket, len(tc.refs))
			es := make([]*Entry, len(tc.refs))
			g := new(Group)
			for k, r := range tc.refs {
				r.Sock = &socks[k]
				es[k] = &Entry{Face: Face{Ref: r}}
				g.Add(es[k])
			}
			require.Equal(t, tc.want, g.arr.Load().kind())
			v := g.View()
			snap, _ := g.Snapshot()
			require.Equal(t, len(es), v.Len())
			for i, e := range es {
				require.Equal(t, e.Ref, v.Ref(i), "member %d", i)
				require.Equal(t, e.Ref, snap.Ref(i), "snapshot member %d", i)
			}
		})
	}
}

// TestGroupRefWhole checks that a pick never reads a Ref torn between two
// members while a writer moves members in and out of the slot it reads:
// member k's value must come with member k's Sock. A pick that took the
// words of a slot without checking the array's sequence count, before or
// after its loads, would mix them.
func TestGroupRefWhole(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  func(s *Socket, k int, vals []int) Ref
		want cellKind
	}{
		{name: "words", ref: wordRef, want: wordCells},
		{name: "pointers", ref: ptrRef, want: ptrCells},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const writes = 200000
			g, es, socks, _ := groupWith(3, tc.ref)
			require.Equal(t, tc.want, g.arr.Load().kind())
			var done atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer done.Store(true)
				// Removing member 0 moves the last member into slot 0;
				// adding it again appends it: slot 0 alternates between
				// two members.
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
					if r.Sock != &socks[member(r)] {
						torn++
					}
				}
			}
			wg.Wait()
			require.Zero(t, torn, "Refs torn in %d reads", reads)
			require.NotZero(t, reads)
		})
	}
}

// TestGroupVerify checks that Verify reports each way an array can
// disagree with itself, and nothing for a sound one.
func TestGroupVerify(t *testing.T) {
	var stray Socket
	for _, tc := range []struct {
		name  string
		spoil func(g *Group, es []*Entry)
		want  string // part of the report; "" for none
	}{
		{name: "sound", spoil: func(*Group, []*Entry) {}},
		{name: "sound after moves", spoil: func(g *Group, es []*Entry) { g.Remove(es[0]); g.Remove(es[3]) }},
		{name: "a cell that differs", spoil: func(g *Group, _ []*Entry) {
			g.arr.Load().words[1].sock.Store(&stray)
		}, want: "member 1's cell differs"},
		{name: "a count left odd", spoil: func(g *Group, _ []*Entry) { g.arr.Load().seq.Add(1) }, want: "sequence count odd"},
		{name: "a position lost", spoil: func(g *Group, es []*Entry) { delete(g.pos, es[2]) }, want: "3 positions"},
		{name: "a position wrong", spoil: func(g *Group, es []*Entry) { g.pos[es[2]] = 0 }, want: "member 2 is at position 0"},
		{name: "a Ref the cells cannot hold", spoil: func(g *Group, es []*Entry) {
			es[1].Ref.Ptr = unsafe.Pointer(&stray)
		}, want: "does not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, es, _ := groupOf(4)
			tc.spoil(g, es)
			var got []string
			g.Verify("g", func(format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) })
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.NotEmpty(t, got)
			require.Contains(t, strings.Join(got, "\n"), tc.want)
		})
	}
}

// TestSnapshotOneMoment holds what Snapshot promises while members join
// and leave: the members of one moment of the call, each once. A writer
// replaces random members, under a lock that a snapshot that gives up
// takes, as the port's lock is taken in package demux; it stamps each
// join and leave with a clock, so that a reader can tell whether some
// moment between its clock readings had exactly the members it copied.
// Without the version check a leave's slot rewrite and its count, seen
// across a copy, list the last member twice.
func TestSnapshotOneMoment(t *testing.T) {
	const (
		size    = 14
		stable  = 4 // members 0..3 never leave
		maxOps  = 1 << 19
		wantOK  = 5000
		maxRead = 200000
	)
	join := make([]atomic.Int64, maxOps)
	leave := make([]atomic.Int64, maxOps)
	socks := make([]Socket, maxOps)
	g := new(Group)
	in := make([]*Entry, 0, size) // the members, guarded by mu
	newMember := func(k int) *Entry {
		return &Entry{Face: Face{Ref: Ref{Sock: &socks[k], Word: uint64(k)}}}
	}
	for k := range size {
		e := newMember(k)
		in = append(in, e)
		g.Add(e)
	}
	var (
		mu    sync.Mutex
		clock atomic.Int64 // the last join or leave begun; state c follows the c-th
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := size
		for i := 0; !stop.Load() && next < maxOps; i++ {
			mu.Lock()
			j := stable + i*7%(size-stable)
			e := in[j]
			leave[e.Ref.Word].Store(clock.Add(1))
			g.Remove(e)
			e = newMember(next)
			next++
			join[e.Ref.Word].Store(clock.Add(1))
			g.Add(e)
			in[j] = e
			mu.Unlock()
		}
		stop.Store(true)
	}()
	ok, locked, reads := 0, 0, 0
	var bad []string
	for ; ok < wantOK && reads < maxRead && !stop.Load() && len(bad) < 5; reads++ {
		c := clock.Load()
		v, done := g.Snapshot()
		if !done {
			mu.Lock()
			v = g.SnapshotLocked()
			mu.Unlock()
			locked++
		}
		d := clock.Load()
		lo, hi := c-1, d // the states the call may have seen
		seen := map[uint64]bool{}
		for i := range v.Len() {
			k := v.At(i).Ref.Word
			if seen[k] {
				bad = append(bad, fmt.Sprintf("member %d twice in %d", k, v.Len()))
			}
			seen[k] = true
			lo = max(lo, join[k].Load())
			if l := leave[k].Load(); l != 0 {
				hi = min(hi, l-1)
			}
		}
		for k := range stable {
			if !seen[uint64(k)] {
				bad = append(bad, fmt.Sprintf("stable member %d missing", k))
			}
		}
		// State s has size-1 members after a leave (odd s), size after
		// a join.
		fits := func(s int64) bool { return v.Len() == size-int(s&1) }
		if lo > hi || lo == hi && !fits(lo) || lo < hi && v.Len() != size && v.Len() != size-1 {
			bad = append(bad, fmt.Sprintf("%d members, no moment of states %d..%d had them", v.Len(), c-1, d))
		}
		if !done {
			continue
		}
		ok++
	}
	stop.Store(true)
	wg.Wait()
	require.Empty(t, bad, "after %d snapshots (%d under the lock)", reads, locked)
	require.NotZero(t, ok)
	t.Logf("%d snapshots, %d under the lock", reads, locked)
}

// TestSnapshotBesideEndlessChurn: a snapshot returns beside a writer that
// is in a join or leave all the time but for an instant, and lets go of
// the lock that guards the group's writes (the port's, in package demux)
// between two stretches of work. The group is large, so that no copy
// fits in that instant: a snapshot that waited for a moment without a
// join or leave, or retried until one, would wait for as long as the
// writer goes on.
func TestSnapshotBesideEndlessChurn(t *testing.T) {
	const size = 3000
	g, es, _ := groupOf(size)
	var mu sync.Mutex
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	started := make(chan struct{})
	go func() {
		defer wg.Done()
		mu.Lock()
		g.ver.Add(1)
		close(started)
		for !stop.Load() {
			for start := time.Now(); time.Since(start) < time.Millisecond; {
			}
			mu.Unlock()
			mu.Lock()
			g.ver.Add(2)
		}
		g.ver.Add(1)
		mu.Unlock()
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	<-started
	for range 5 {
		done := make(chan View, 1)
		go func() {
			v, ok := g.Snapshot()
			if !ok {
				mu.Lock()
				v = g.SnapshotLocked()
				mu.Unlock()
			}
			done <- v
		}()
		select {
		case v := <-done:
			require.Equal(t, size, v.Len())
			for i := range size {
				require.Same(t, es[i], v.At(i))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the snapshot did not return beside a writer that never stops")
		}
	}
}
