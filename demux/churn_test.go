package demux_test

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// storages are the two storages, for the tests that must run on both.
var storages = []struct {
	name string
	cfg  demux.Config
}{
	{"default", demux.Config{}},
	{"slots256", demux.Config{Slots: 256}},
}

// churn runs write in a loop on a goroutine of its own until the test
// ends: a writer that never stops while the test's reader works.
func churn(t *testing.T, write func()) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			write()
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})
}

// within fails the test unless read returns within d, and returns what
// it returned: a reader that a writer starves never does.
func within[T any](t *testing.T, d time.Duration, what string, read func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- read() }()
	select {
	case v := <-done:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not return within %v beside a writer that never stops", what, d)
		panic("unreachable")
	}
}

// TestMembersUnderChurn: while members join and leave without pause, each
// Members snapshot lists the members of one moment, each once, with the
// members that stay throughout, and returns in time. The group is large,
// so that a copy without the port's lock always overlaps a join or leave:
// a snapshot that only retried would never finish.
func TestMembersUnderChurn(t *testing.T) {
	const stable, minSnapshots, spell = 3000, 5, 2 * time.Second
	for _, st := range storages {
		t.Run(st.name, func(t *testing.T) {
			tab, err := demux.New[int](st.cfg)
			require.NoError(t, err)
			o := demux.Options{Addr: netip.MustParseAddr("10.0.0.1"), Port: 7000, ReusePort: true}
			var g demux.Group[int]
			var kept []*demux.Socket[int]
			for i := range stable {
				s, err := tab.Bind(o, i)
				require.NoError(t, err)
				kept = append(kept, s)
				g, _ = s.Group()
			}
			// a leaves before b, the last member, which takes a's place.
			churn(t, func() {
				a, errA := tab.Bind(o, -1)
				b, errB := tab.Bind(o, -2)
				if errA != nil || errB != nil {
					panic(fmt.Sprint(errA, errB))
				}
				_ = a.Close()
				_ = b.Close()
			})
			start := time.Now()
			for i := 0; i < minSnapshots || time.Since(start) < spell; i++ {
				m := within(t, 10*time.Second, "Members", g.Members)
				seen := map[*demux.Socket[int]]bool{}
				for _, s := range m.All() {
					require.False(t, seen[s], "a member listed twice among %d", m.Len())
					seen[s] = true
				}
				for _, s := range kept {
					require.True(t, seen[s], "a member that stayed is missing")
				}
				assert.LessOrEqual(t, m.Len(), stable+2, "more members than any moment had")
			}
		})
	}
}
