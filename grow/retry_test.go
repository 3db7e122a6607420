package grow

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// TestSearchBesideEndlessMoves: a search of the indexes returns, with the
// right answer, beside a writer that moves sockets of the port without
// pause, so that a move overlaps every lock-free attempt. The searches
// are long on purpose: a unicast one scores every class of the wildcard's
// key (a socket per device), a multicast one lists every receiver. A
// search that only retried would not return.
//
// The unicast search's classes differ by peer: wildcard sockets that
// connected without a source address, which stay in the wildcard's key.
// (Sockets that differ only by device are keys of their own, which a
// search does not read.)
func TestSearchBesideEndlessMoves(t *testing.T) {
	const port = 53
	for _, tc := range []struct {
		name    string
		sockets int
		// class makes the i-th socket a class of its own, or leaves it
		// as it is; the last one, left alone, is the unicast answer.
		class func(e *sock.Entry, i int)
		// search returns what the reader got and what it should have.
		search func(g *Engine, last *sock.Entry, sockets int) (got, want int)
	}{
		{"unicast", 1000, func(e *sock.Entry, i int) {
			e.Flags |= sock.Connected
			e.Remote, e.RemotePort = sock.Map4(10<<24|uint32(i)), 4000
		}, func(g *Engine, last *sock.Entry, _ int) (int, int) {
			q := moveQuery(t, "10.0.0.2:53")
			r, _ := g.Lookup(q)
			if r == nil || r.Sock != last.Ref.Sock {
				return 0, 1
			}
			return 1, 1
		}},
		{"multicast", 1000, func(*sock.Entry, int) {}, func(g *Engine, _ *sock.Entry, sockets int) (int, int) {
			rs, _ := g.Multicast(moveQuery(t, "239.1.1.1:53"), nil)
			seen := map[*sock.Entry]bool{}
			for _, e := range rs {
				seen[e] = true
			}
			return len(seen) + 10*(len(rs)-len(seen)), sockets + 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			g := New([4]uint64{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}, 10, r.Uint64(), &bind.Occupancy{}, bind.NewRand(nil))
			l, err := ipv6.Bind(netip.IPv4Unspecified(), false, 0, nil)
			require.NoError(t, err)
			pr := g.LockPort(port)
			var last *sock.Entry
			for i := range tc.sockets + 1 {
				sk := new(sock.Socket)
				e := &sock.Entry{Face: sock.Face{Port: port, Flags: l.Flags | sock.ReuseAddr, V4: l.V4, V6: l.V6,
					Seq: uint64(i + 1), Ref: sock.Ref{Sock: sk}}}
				if i < tc.sockets {
					tc.class(e, i)
				}
				sk.Cur.Store(e)
				g.Link(pr, e)
				last = e
			}
			g.Unlock(pr)

			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			started := make(chan struct{})
			go func() {
				defer wg.Done()
				// The writer is in a move all the time, and lets go of
				// the port's lock between two stretches of work, for a
				// reader that waits for it. A reader that waits for a
				// moment without a move, or retries until one, waits for
				// as long as the writer goes on. (A real writer ends its
				// move before it unlocks; one that ended it for an
				// instant here let a retrying reader through whenever
				// the scheduler paused the writer in that instant, as it
				// did on a loaded machine.)
				p := g.LockPort(port)
				p.s.list.Seq.Begin()
				close(started)
				for !stop.Load() {
					moveFor(time.Millisecond)
					g.Unlock(p)
					p = g.LockPort(port)
				}
				p.s.list.Seq.End()
				g.Unlock(p)
			}()
			<-started
			for range 5 {
				type result struct{ got, want int }
				done := make(chan result, 1)
				go func() {
					got, want := tc.search(g, last, tc.sockets)
					done <- result{got, want}
				}()
				select {
				case res := <-done:
					assert.Equal(t, res.want, res.got)
				case <-time.After(5 * time.Second):
					t.Fatal("the search did not return beside a writer that never stops")
				}
			}
		})
	}
}

// moveQuery is a datagram from 192.0.2.1:1000 to dst on interface 1 000 000,
// which no socket of the test is bound to.
func moveQuery(t *testing.T, dst string) *lookup.Query {
	var q lookup.Query
	require.True(t, q.Init(netip.MustParseAddrPort("192.0.2.1:1000"), netip.MustParseAddrPort(dst), 1000000))
	return &q
}

// moveFor busies the caller for about d, as a move's work would.
func moveFor(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
