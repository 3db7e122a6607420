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
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

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
	for _, st := range demuxtest.Storages() {
		t.Run(st.Name, func(t *testing.T) {
			tab, err := demux.New[int](st.Table)
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

// TestLookupsBesideMover: lookups on a port where writers move sockets
// without pause (connect, disconnect) return in time, with the right
// answer, on either storage, whichever way the search ends: lock-free, or
// after its bounded retries. Each search is long, over thousands of
// receivers (multicast) or of wildcard sockets bound each to its own
// device (unicast), so that moves overlap many of its attempts. Whether
// the writers starve a search that only retries depends on how the
// machine schedules them; the tests that hold the bound whatever the
// scheduling, with a writer that is in a move nearly all the time, are
// TestSearchBesideEndlessMoves in packages grow and fixed.
func TestLookupsBesideMover(t *testing.T) {
	const port = 7100
	dst := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), port)
	group := netip.AddrPortFrom(netip.MustParseAddr("239.1.1.1"), port)
	src := netip.MustParseAddrPort("192.0.2.1:5000")
	for _, st := range demuxtest.Storages() {
		for _, kind := range []string{"multicast", "unicast"} {
			t.Run(st.Name+"/"+kind, func(t *testing.T) {
				// A bind of a device's socket, and the fixed slots'
				// binds, scan the sockets already on the port: those
				// shapes get fewer.
				receivers := 20000
				if st.Table.Slots != 0 || kind == "unicast" {
					receivers = 3000
				}
				tab, err := demux.New[int](st.Table)
				require.NoError(t, err)
				wild := netip.IPv4Unspecified()
				for i := range receivers {
					o := demux.Options{Addr: wild, Port: port, ReuseAddr: true}
					if kind == "unicast" {
						o = demux.Options{Addr: wild, Port: port, ReuseAddr: true, Device: 100 + i}
					}
					_, err := tab.Bind(o, i)
					require.NoError(t, err)
				}
				want, err := tab.Bind(demux.Options{Addr: wild, Port: port, ReuseAddr: true}, -1)
				require.NoError(t, err)
				// Two movers, each connecting a socket of the port to a
				// peer with dst's address as its source (into dst's
				// key) and disconnecting it (back to the wildcard's,
				// without a device: then it receives too).
				answers := map[*demux.Socket[int]]bool{want: true}
				for w := range 2 {
					m, err := tab.Bind(demux.Options{Addr: wild, Port: port, ReuseAddr: true, Device: 1}, -2)
					require.NoError(t, err)
					answers[m] = true
					peer := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), uint16(1000+w))
					churn(t, func() {
						if err := m.Connect(peer, dst.Addr()); err != nil {
							panic(err)
						}
						if err := m.Disconnect(); err != nil {
							panic(err)
						}
					})
				}
				for range 3 {
					switch kind {
					case "multicast":
						got := within(t, 10*time.Second, "LookupMulticast", func() map[*demux.Socket[int]]int {
							got := map[*demux.Socket[int]]int{}
							tab.LookupMulticast(src, group, 2, func(s *demux.Socket[int], _ int) bool { got[s]++; return true })
							return got
						})
						for _, n := range got {
							require.Equal(t, 1, n, "a receiver yielded %d times", n)
						}
						assert.Equal(t, 1, got[want], "a receiver that stayed was not yielded")
						assert.GreaterOrEqual(t, len(got), receivers+1, "receivers yielded")
						assert.LessOrEqual(t, len(got), receivers+3, "receivers yielded")
					case "unicast":
						got := within(t, 10*time.Second, "Lookup", func() *demux.Socket[int] {
							s, _ := tab.Lookup(src, dst, 2)
							return s
						})
						assert.True(t, answers[got], "the lookup found %v, not the wildcard socket", got)
					}
				}
			})
		}
	}
}
