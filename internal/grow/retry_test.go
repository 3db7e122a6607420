package grow

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
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
		class func(e *lookup.Entry, i int)
		// search returns what the reader got and what it should have.
		search func(g *Engine, last *lookup.Entry, sockets int) (got, want int)
	}{
		{"unicast", 1000, func(e *lookup.Entry, i int) {
			e.Flags |= lookup.Connected
			e.Remote, e.RemotePort = lookup.Map4(10<<24|uint32(i)), 4000
		}, func(g *Engine, last *lookup.Entry, _ int) (int, int) {
			q := moveQuery(t, "10.0.0.2:53")
			r, _ := g.Lookup(q)
			if r == nil || r.Sock != last.Ref.Sock {
				return 0, 1
			}
			return 1, 1
		}},
		{"multicast", 1000, func(*lookup.Entry, int) {}, func(g *Engine, _ *lookup.Entry, sockets int) (int, int) {
			rs, _ := g.Multicast(moveQuery(t, "239.1.1.1:53"), nil)
			seen := map[*lookup.Entry]bool{}
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
			var last *lookup.Entry
			for i := range tc.sockets + 1 {
				sk := new(lookup.Socket)
				e := &lookup.Entry{Face: lookup.Face{Port: port, Flags: l.Flags | lookup.ReuseAddr, V4: l.V4, V6: l.V6,
					Seq: uint64(i + 1), Ref: lookup.Ref{Sock: sk}}}
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

// TestSearchSeesEveryMove: a lock-free search of the indexes finds the
// socket that receives a datagram while a writer moves that socket, and
// only that one, between two keys the search reads one after the other.
// Replace publishes the new entry before it removes the old one, which
// covers a search that reads the new key last; a search that reads the
// new key first, and the old one after the move, finds neither, and only
// the retry on the port's sequence count (indexed) saves it.
//
// The mover M is an IPv4 socket bound to the wildcard on device 1, which
// the datagram (from peer to local, on interface 1) reaches in each state
// the move puts it in, and with the best score of the port: a miss, or the
// rival R (a dual-stack "::" socket, which scores less), is a torn search.
// The search reads the 4-tuple index, then the destination's keys, then
// the wildcard's key of no device, then the wildcard's key of device 1,
// where M is bound. Between the first read and the last it scores every
// class of the wildcard's key of no device: a thousand fillers (wildcard
// sockets connected without a source, to other peers) make that long, so
// that whole moves fall inside it. In demux's TestConnectMoveNeverMissed
// only a probe of the destination's key lies between the reads of the two
// places its mover crosses (the 4-tuple index, the wildcard's key), and
// the search's long part, the scoring of the wildcard's classes, comes
// after both: a whole move falls between them too rarely for that test to
// notice a search that does not retry.
func TestSearchSeesEveryMove(t *testing.T) {
	const port, fillers = 53, 1000
	const dev = 1
	peer := netip.MustParseAddrPort("192.0.2.7:4000")
	local := netip.MustParseAddr("10.0.0.1")
	dst := netip.AddrPortFrom(local, port)
	for _, tc := range []struct {
		name string
		// away returns the state M moves to from its bound state b,
		// which the search reads before it reads b's key.
		away func(t *testing.T, b *lookup.Entry) *lookup.Entry
	}{
		// A connect with a source address: to the 4-tuple index,
		// searched first.
		{"connect", func(t *testing.T, b *lookup.Entry) *lookup.Entry {
			l, p, err := ipv6.Connect(ipv6.Local{Flags: b.Flags, V4: b.V4, V6: b.V6}, dev, peer, local, nil)
			require.NoError(t, err)
			e := &lookup.Entry{Face: b.Face}
			e.Flags = l.Flags | b.Flags&lookup.ReuseAddr | lookup.Connected | lookup.Hash4
			e.V4, e.V6, e.Remote, e.RemotePort = l.V4, l.V6, p.Addr, p.Port
			return e
		}},
		// SO_BINDTODEVICE to no device: to the wildcard's key of no
		// device, searched just before the device's.
		{"drop device", func(_ *testing.T, b *lookup.Entry) *lookup.Entry {
			e := &lookup.Entry{Face: b.Face}
			e.Device = 0
			return e
		}},
	} {
		for _, look := range []struct {
			name string
			// find returns the socket a lookup of the datagram gives.
			find func(g *Engine) *lookup.Socket
		}{
			{"Lookup", func(g *Engine) *lookup.Socket {
				var q lookup.Query
				q.Init(peer, dst, dev)
				r, _ := g.Lookup(&q)
				return sockOf(r)
			}},
			// Lookup4 hands a wildcard key of many classes to the same
			// search.
			{"Lookup4", func(g *Engine) *lookup.Socket {
				var q lookup.Query
				r, _, _ := g.Lookup4(peer, dst, dev, &q)
				return sockOf(r)
			}},
		} {
			t.Run(tc.name+"/"+look.name, func(t *testing.T) {
				testSearchSeesEveryMove(t, port, fillers, dev, tc.away, look.find)
			})
		}
	}
}

// testSearchSeesEveryMove runs TestSearchSeesEveryMove's case: a writer
// moves M away from its bound state and back without pause, while
// readers look the datagram up, for half a second or until a reader sees
// a torn search. Without the retry, each case saw one within 0.1 to 1 s
// (setup included) in each of 10 runs under the race detector on a
// loaded 2-core machine; with it, none saw one in 20 runs.
func testSearchSeesEveryMove(t *testing.T, port uint16, fillers int, dev int32,
	away func(*testing.T, *lookup.Entry) *lookup.Entry, find func(*Engine) *lookup.Socket) {
	const budget = 500 * time.Millisecond
	r := rand.New(rand.NewPCG(9, 10))
	g := New([4]uint64{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}, 10, r.Uint64(), &bind.Occupancy{}, bind.NewRand(nil))
	bound := func(a netip.Addr, seq int) *lookup.Entry {
		l, err := ipv6.Bind(a, false, 0, nil)
		require.NoError(t, err)
		sk := new(lookup.Socket)
		e := &lookup.Entry{Face: lookup.Face{Port: port, Flags: l.Flags | lookup.ReuseAddr, V4: l.V4, V6: l.V6,
			Seq: uint64(seq), Ref: lookup.Ref{Sock: sk}}}
		sk.Cur.Store(e)
		return e
	}
	pr := g.LockPort(port)
	for i := range fillers {
		e := bound(netip.IPv4Unspecified(), i+1)
		e.Flags |= lookup.Connected
		e.Remote, e.RemotePort = lookup.Map4(10<<24|uint32(i)), 4000
		g.Link(pr, e)
	}
	rival := bound(netip.IPv6Unspecified(), fillers+1)
	g.Link(pr, rival)
	mover := bound(netip.IPv4Unspecified(), fillers+2)
	mover.Device = dev
	g.Link(pr, mover)
	g.Unlock(pr)
	want := mover.Ref.Sock
	require.Same(t, want, find(g), "the datagram's socket, before any move")
	// The states M takes: a real writer makes a new entry for every
	// state of a socket, as a search may still stand on the old one.
	there, back := away(t, mover).Face, mover.Face

	// moves counts M's round trips, away and back; a reader that sees it
	// change across its lookup raced a move.
	var moves atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cur := mover
		move := func(f lookup.Face) {
			e := &lookup.Entry{Face: f}
			p := g.LockPort(port)
			e.Sock().Cur.Store(e) // as demux does, for Verify
			g.Replace(p, cur, e)
			g.Unlock(p)
			cur = e
		}
		for !stop.Load() {
			move(there)
			move(back)
			moves.Add(1)
		}
	}()

	var raced, lookups atomic.Int64
	var firstBad atomic.Value
	start := time.Now()
	going := func() bool {
		return time.Since(start) < budget && firstBad.Load() == nil
	}
	for range max(runtime.GOMAXPROCS(0)-1, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for going() {
				before := moves.Load()
				got := find(g)
				lookups.Add(1)
				if moves.Load() != before {
					raced.Add(1)
				}
				if got != want {
					what := "nothing"
					if got == rival.Ref.Sock {
						what = "the rival"
					}
					firstBad.CompareAndSwap(nil, fmt.Sprintf("lookup %d (%d raced a move) got %s", lookups.Load(), raced.Load(), what))
				}
			}
		}()
	}
	for going() {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d lookups, %d raced a move; %d moves", lookups.Load(), raced.Load(), moves.Load())
	assert.Nil(t, firstBad.Load(), "a search missed the moving socket")
	assert.Positive(t, raced.Load(), "no lookup raced a move: the test checked nothing")
	requireVerified(t, g)
}

// sockOf returns the socket r leads to, nil if r is nil (no socket).
func sockOf(r *lookup.Ref) *lookup.Socket {
	if r == nil {
		return nil
	}
	return r.Sock
}
