package grow

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lookup"
)

// peerPort holds a port's sockets for the peer filter tests: unconnected
// entries on 10.0.0.1, which connect to peers of their own.
type peerPort struct {
	t  *testing.T
	g  *Engine
	pr *Port
}

const peerTestPort = 4433

func newPeerPort(t *testing.T) *peerPort {
	r := rand.New(rand.NewPCG(3, 4))
	g := New([4]uint64{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}, AlwaysIndex, r.Uint64(), &bind.Occupancy{}, bind.NewRand(nil))
	pr := g.LockPort(peerTestPort)
	t.Cleanup(func() { g.Unlock(pr) })
	return &peerPort{t: t, g: g, pr: pr}
}

// bind links an unconnected entry.
func (p *peerPort) bind() *lookup.Entry {
	sk := new(lookup.Socket)
	e := &lookup.Entry{Face: lookup.Face{Port: peerTestPort, Flags: lookup.HasV4 | lookup.ReuseAddr,
		V4: 10<<24 | 1, V6: lookup.Map4(10<<24 | 1), Ref: lookup.Ref{Sock: sk}}}
	sk.Cur.Store(e)
	p.g.Link(p.pr, e)
	return e
}

// connect links an entry connected to peer i (192.168.0.0/16 plus i, port
// 5000).
func (p *peerPort) connect(i int) *lookup.Entry {
	old := p.bind()
	e := &lookup.Entry{Face: old.Face}
	e.Flags |= lookup.Connected | lookup.Hash4
	e.Remote, e.RemotePort = lookup.Map4(192<<24|168<<16+uint32(i)), 5000
	old.Sock().Cur.Store(e)
	p.g.Replace(p.pr, old, e)
	return e
}

func (p *peerPort) verify(step string) {
	var errs []string
	p.g.Verify(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
	require.Empty(p.t, errs, step)
}

// filter returns the port's peer filter.
func (p *peerPort) filter() *peerFilter { return p.pr.s.peers.Load() }

// turnedAway returns the share of 10 000 sources without a socket whose
// bit is clear in the filter.
func (p *peerPort) turnedAway() float64 {
	r := rand.New(rand.NewPCG(1, 2))
	f, clear := p.filter(), 0
	for range 10000 {
		if !f.mayHave(p.g.peerHash(lookup.Map4(172<<24|r.Uint32N(1<<20)), uint16(r.UintN(65536)))) {
			clear++
		}
	}
	return float64(clear) / 10000
}

// TestPeerFilterSizes: a port's peer filter grows with its connected
// sockets and shrinks as they close, so that it keeps between 4 and 64
// bits a peer, and turns away at least three sources in four that have no
// socket; Verify holds throughout. A filter kept at 512 bits turned away
// 33 % of them at 1 000 peers and none at 5 000.
func TestPeerFilterSizes(t *testing.T) {
	for _, n := range []int{10, 100, 1000, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := newPeerPort(t)
			p.bind() // the listener
			var conns []*lookup.Entry
			for i := range n {
				conns = append(conns, p.connect(i))
			}
			p.verify("connected")
			size := p.filter().size()
			assert.GreaterOrEqual(t, size, minBitsPerPeer*n, "bits")
			assert.LessOrEqual(t, size, max(maxBitsPerPeer*n, minPeerBits), "bits")
			away := p.turnedAway()
			t.Logf("%d peers: %d bits, %.1f %% of other sources turned away", n, size, 100*away)
			assert.Greater(t, away, 0.75, "sources turned away, %d bits", size)
			for i, e := range conns {
				p.g.Unlink(p.pr, e)
				if i%97 == 0 {
					p.verify(fmt.Sprintf("closed %d", i))
				}
			}
			p.verify("closed")
			assert.Equal(t, minPeerBits, p.filter().size(), "bits with no peer")
			assert.Zero(t, p.filter().n)
		})
	}
}

// TestPeerFilterRebuildBound: a port whose chain holds many more
// unconnected sockets than peers keeps its filter's size, since a resize
// would scan the chain: it grows once the peers are an eighth of the
// chain.
func TestPeerFilterRebuildBound(t *testing.T) {
	p := newPeerPort(t)
	for range 4000 {
		p.bind()
	}
	for i := range 300 {
		p.connect(i)
	}
	p.verify("300 peers")
	assert.Equal(t, minPeerBits, p.filter().size(), "300 peers, 4 300 sockets")
	for i := 300; i < 700; i++ {
		p.connect(i)
	}
	p.verify("700 peers")
	assert.Greater(t, p.filter().size(), minPeerBits, "700 peers, 4 700 sockets")
}

// TestPeerFilterStuckCount: 300 sockets connected to one peer, whose
// bit's count stops at maxCount. The count sticks while the sockets close
// (Verify accepts it) until the filter shrinks and recounts: then the bit
// counts the peers left, and clears with the last.
func TestPeerFilterStuckCount(t *testing.T) {
	p := newPeerPort(t)
	p.bind() // the listener
	var conns []*lookup.Entry
	for range 300 {
		conns = append(conns, p.connect(0))
	}
	p.verify("shared peer")
	h := p.g.peerHash(conns[0].Remote, conns[0].RemotePort)
	bit := func() int { // the count of the peer's bit
		f := p.filter()
		b := h >> f.shift
		if f.count != nil {
			return int(f.count[b])
		}
		c := 0
		for _, x := range f.small {
			if uint64(x) == b {
				c++
			}
		}
		return c
	}
	require.Equal(t, maxCount, bit())
	for _, e := range conns[:250] {
		p.g.Unlink(p.pr, e)
	}
	p.verify("50 left")
	assert.Equal(t, maxCount, bit(), "stuck with 50 peers")
	assert.True(t, p.filter().mayHave(h))
	for _, e := range conns[250:280] {
		p.g.Unlink(p.pr, e)
	}
	p.verify("20 left, shrunk")
	assert.Equal(t, minPeerBits, p.filter().size())
	assert.Equal(t, 20, bit(), "recounted by the shrink")
	for _, e := range conns[280:] {
		p.g.Unlink(p.pr, e)
	}
	p.verify("all closed")
	assert.False(t, p.filter().mayHave(h))
}

// TestPeerFilterChurn: a listener and n sockets connected on one address
// and port, some pairs sharing a peer and so a filter bit; they reconnect
// and close in a random order, taking the filter through its sizes and
// from its list to its counts and back. After every change, each
// connected socket still receives its peer's datagrams, a reconnected
// socket's old peer and unknown sources reach the listener, through
// Lookup and Lookup4, and Verify holds. One-phase lookups, which scan the
// port and never read the filter, are left out: at 300 peers they made
// the test 4 times as long under the race detector.
func TestPeerFilterChurn(t *testing.T) {
	local := netip.MustParseAddr("10.0.0.1")
	dst := netip.AddrPortFrom(local, 53)
	peer := func(i int) netip.AddrPort {
		// Pairs 2k and 2k+1 share their peer.
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i / 2 >> 8), byte(i / 2)}), 5000)
	}
	for _, n := range []int{8, 64, 65, 300} {
		for _, th := range thresholds[:2] {
			t.Run(fmt.Sprintf("%d/%s", n, th.name), func(t *testing.T) {
				w := newWriter(t, th.threshold, uint64(n))
				listener := w.bind(local, 53, bindOpts{})
				var socks []*wsock
				peers := map[*wsock]netip.AddrPort{}
				for i := range n {
					s := w.bind(local, 53, bindOpts{})
					require.NoError(t, w.connect(s, peer(i), local))
					socks = append(socks, s)
					peers[s] = peer(i)
				}
				receives := func(src netip.AddrPort, want *wsock, step string) {
					got, _ := w.lookup(src, dst, 1)
					require.Same(t, want.sk, got, "%s: Lookup from %v", step, src)
					got, _ = w.lookup4(src, dst, 1)
					require.Same(t, want.sk, got, "%s: Lookup4 from %v", step, src)
				}
				check := func(step string) {
					w.verify(step)
					for _, p := range peers {
						got, _ := w.lookup4(p, dst, 1)
						require.NotNil(t, got, "%s: from %v", step, p)
						require.Equal(t, p, got.Cur.Load().Peer(), "%s: from %v", step, p)
					}
					for j := range 20 {
						receives(netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, 16, 0, byte(j)}), 7000), listener, step)
					}
				}
				check("built")
				r := rand.New(rand.NewPCG(uint64(n), 1))
				r.Shuffle(len(socks), func(i, j int) { socks[i], socks[j] = socks[j], socks[i] })
				for i, s := range socks {
					if i%3 == 0 {
						// Reconnect to a peer of its own; the old one, if no
						// other socket has it, falls to the listener.
						old := peers[s]
						p := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 169, byte(i >> 8), byte(i)}), 6000)
						require.NoError(t, w.connect(s, p, local))
						peers[s] = p
						if !hasPeer(peers, old) {
							receives(old, listener, fmt.Sprintf("old peer %v", old))
						}
						check(fmt.Sprintf("reconnect %d", i))
					}
					w.close(s)
					delete(peers, s)
					check(fmt.Sprintf("close %d", i))
				}
			})
		}
	}
}

func hasPeer(peers map[*wsock]netip.AddrPort, p netip.AddrPort) bool {
	for _, x := range peers {
		if x == p {
			return true
		}
	}
	return false
}

// TestPeerFilterResizeUnderLookups: a port's peer filter, resized as its
// connected sockets come and go, is published whole. Readers look up 200
// connected sockets that stay, through Lookup4 and Lookup, while a writer
// connects 3 000 more on the same address and port and closes them,
// round after round, so that the filter grows from 2 048 bits to 32 768
// and shrinks back each round. Every lookup must find its socket: one
// that reads a filter published before its bits were all set skips the
// 4-tuple index and gets the listener. Publishing the filter first was
// caught in 4 runs of 5 with 4 rounds, and in 14 of 14 with 10 (under
// the race detector, on a 2-core machine).
func TestPeerFilterResizeUnderLookups(t *testing.T) {
	const stable, extra, rounds = 200, 3000, 10
	local := netip.MustParseAddr("10.0.0.1")
	dst := netip.AddrPortFrom(local, 53)
	peer := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}), 5000)
	}
	w := newWriter(t, 10, 5)
	w.bind(local, 53, bindOpts{})
	want := make([]*lookup.Socket, stable)
	for i := range stable {
		s := w.bind(local, 53, bindOpts{})
		require.NoError(t, w.connect(s, peer(i), local))
		want[i] = s.sk
	}
	var done, lookups, missed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		socks := make([]*wsock, 0, extra)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i := range extra {
				s := w.bind(local, 53, bindOpts{})
				if !assert.NoError(t, w.connect(s, peer(stable+i), local)) {
					return
				}
				socks = append(socks, s)
			}
			for _, s := range socks {
				w.close(s)
			}
			socks = socks[:0]
			done.Add(1)
		}
	}()
	for k, look := range []func(src netip.AddrPort) *lookup.Socket{
		func(src netip.AddrPort) *lookup.Socket { s, _ := w.lookup4(src, dst, 1); return s },
		func(src netip.AddrPort) *lookup.Socket { s, _ := w.lookup(src, dst, 1); return s },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(5, uint64(k)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if i := r.IntN(stable); look(peer(i)) != want[i] {
					missed.Add(1)
				}
				lookups.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for done.Load() < rounds && missed.Load() == 0 && time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d rounds, %d lookups", done.Load(), lookups.Load())
	require.Zero(t, missed.Load(), "lookups that missed a socket that stayed")
	require.GreaterOrEqual(t, done.Load(), int64(rounds), "the writer did not finish its rounds")
	assert.Positive(t, lookups.Load())
	w.verify()
}
