package fixed

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/lookup"
)

// TestSearchBesideEndlessMoves: a search of the secondary slots returns,
// with the right answer, beside a writer that is in a move between them
// nearly all the time, without pause: a reader that waits for a moment
// without a move, or retries until one, waits for as long as the writer
// goes on. The slots are long, so that a search cannot fit between two
// moves: a thousand wildcard sockets, each bound to its own device for
// the unicast lookups, and receivers all for the multicast ones.
func TestSearchBesideEndlessMoves(t *testing.T) {
	const sockets = 1000
	const unicastDst, multicastDst = "10.0.0.2:53", "239.1.1.1:53"
	src := "192.0.2.1:1000"
	for _, tc := range []struct {
		name    string
		dst     string
		devices bool // the unicast shape: a device each
		search  func(tabs *tables, q *lookup.Query) []*lookup.Socket
	}{
		{name: "TwoPhase", dst: unicastDst, devices: true, search: func(tabs *tables, q *lookup.Query) []*lookup.Socket {
			return refs(tabs.twoPhase(q))
		}},
		{name: "Hybrid", dst: unicastDst, devices: true, search: func(tabs *tables, q *lookup.Query) []*lookup.Socket {
			r, _ := tabs.hybrid(q)
			return refs(r)
		}},
		{name: "MatchHybrid", dst: multicastDst, search: func(tabs *tables, q *lookup.Query) []*lookup.Socket {
			rs, _ := tabs.matchHybrid(q, nil)
			return socks(rs)
		}},
		{name: "MatchSecondary", dst: multicastDst, search: func(tabs *tables, q *lookup.Query) []*lookup.Socket {
			// As package demux's two-phase strategy does.
			rs, ok := tabs.matchSecondary(q, nil, -1)
			if !ok {
				rs = tabs.matchPrimary(q, rs)
			}
			return socks(rs)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h1, err := hash1.New(256)
			require.NoError(t, err)
			h2, err := hash2.New(256, 7)
			require.NoError(t, err)
			tabs := &tables{h1: h1, h2: h2, threshold: 10}
			var last *lookup.Entry
			for i := range sockets + 1 {
				var dev int32
				if tc.devices && i < sockets {
					dev = int32(i + 1)
				}
				e := named(t, "0.0.0.0", dev, uint64(i+1))
				e.Flags |= lookup.ReuseAddr
				h1.Slot(e.Port).Chain.PushFront(&e.N1)
				h2.Push(h2.IndexOf(e), e)
				last = e
			}
			q := query(t, src, tc.dst, 1000000)
			want := []*lookup.Socket{last.Ref.Sock}
			if !tc.devices {
				want = want[:0]
				for n := h1.Slot(53).Chain.First(); n != nil; n = n.Next.Load() {
					want = append(want, lookup.OfPrimary(n).Ref.Sock)
				}
			}
			exact, wild := h2.At(h2.Index(h2.AddrHash(q.Dst), 53)), h2.At(h2.Index(h2.WildHash(), 53))
			require.NotSame(t, exact, wild, "pick another seed")

			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			started := make(chan struct{})
			go func() {
				defer wg.Done()
				exact.Seq.Begin()
				wild.Seq.Begin()
				close(started)
				// In a move for good: a writer that ended its move for
				// an instant let a retrying reader through whenever the
				// scheduler paused it in that instant, as it may on a
				// loaded machine, and the test then passed without the
				// bound.
				for !stop.Load() {
					moveFor(5 * time.Millisecond)
				}
				wild.Seq.End()
				exact.Seq.End()
			}()
			defer func() {
				stop.Store(true)
				wg.Wait()
			}()
			<-started
			for range 5 {
				done := make(chan []*lookup.Socket, 1)
				go func() { done <- tc.search(tabs, q) }()
				select {
				case got := <-done:
					assert.ElementsMatch(t, want, got)
				case <-time.After(5 * time.Second):
					t.Fatal("the search did not return beside a writer that never stops")
				}
			}
		})
	}
}

// refs returns r's socket, if any.
func refs(r *lookup.Ref) []*lookup.Socket {
	if r == nil {
		return nil
	}
	return []*lookup.Socket{r.Sock}
}

// socks returns the entries' sockets.
func socks(es []*lookup.Entry) []*lookup.Socket {
	out := make([]*lookup.Socket, len(es))
	for i, e := range es {
		out[i] = e.Ref.Sock
	}
	return out
}

// moveFor busies the caller for about d, as a move's work would.
func moveFor(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
