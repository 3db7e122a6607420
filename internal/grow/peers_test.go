package grow

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/internal/sock"
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
func (p *peerPort) bind() *sock.Entry {
	sk := new(sock.Socket)
	e := &sock.Entry{Face: sock.Face{Port: peerTestPort, Flags: sock.HasV4 | sock.ReuseAddr,
		V4: 10<<24 | 1, V6: sock.Map4(10<<24 | 1), Ref: sock.Ref{Sock: sk}}}
	sk.Cur.Store(e)
	p.g.Link(p.pr, e)
	return e
}

// connect links an entry connected to peer i (192.168.0.0/16 plus i, port
// 5000).
func (p *peerPort) connect(i int) *sock.Entry {
	old := p.bind()
	e := &sock.Entry{Face: old.Face}
	e.Flags |= sock.Connected | sock.Hash4
	e.Remote, e.RemotePort = sock.Map4(192<<24|168<<16+uint32(i)), 5000
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
		if !f.mayHave(p.g.peerHash(sock.Map4(172<<24|r.Uint32N(1<<20)), uint16(r.UintN(65536)))) {
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
			var conns []*sock.Entry
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
	var conns []*sock.Entry
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
