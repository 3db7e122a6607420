package grow

import (
	"math/bits"
	"sync/atomic"

	"github.com/udpdemux/udpdemux/internal/sock"
)

// peerBits is the size of a port's peer filter, a power of two.
const peerBits = 512

// smallPeers is how many peers a filter keeps in a list before it switches
// to counts per bit.
const smallPeers = 64

// peerFilter says which sources may have a socket of the port in the
// 4-tuple index: a one-hash Bloom filter of the peers of those sockets.
// A lookup from a source whose bit is clear skips the 4-tuple index,
// whose probe lands at random in a table of every connected socket of the
// host. That spares a cache miss per datagram to a server port that holds
// a few connected sockets and takes datagrams from everywhere else (a DNS
// or QUIC server's); with 8 peers, 1.6 % of other sources still probe.
//
// A bit is set before the socket that needs it is published and cleared
// after the last socket that needed it is unpublished, so the filter never
// hides a socket that stays in the index.
type peerFilter struct {
	bits [peerBits / 64]atomic.Uint64 // read by lookups

	// The bit of each peer while there are at most smallPeers of them,
	// then counts per bit. Guarded by the port's lock.
	small []uint16
	count *[peerBits]int32
}

// peerBit returns the filter bit of a peer. Its multiplier is secret:
// an outsider who aims sources at set bits only makes them probe the
// index, as every lookup did without the filter.
func (g *Engine) peerBit(a sock.Addr16, port uint16) uint16 {
	x := a.Lo ^ bits.RotateLeft64(a.Hi, 31) ^ uint64(port)<<48
	return uint16((x * g.mulC) >> (64 - 9))
}

// mayHave reports whether the peer's bit is set.
func (f *peerFilter) mayHave(b uint16) bool {
	return f.bits[b/64].Load()&(1<<(b%64)) != 0
}

// addPeer counts a peer of a socket that enters the 4-tuple index; the
// caller holds pr's lock and publishes the socket after.
func (g *Engine) addPeer(pr *Port, e *sock.Entry) {
	f := pr.s.peers.Load()
	if f == nil {
		f = new(peerFilter)
		pr.s.peers.Store(f)
	}
	b := g.peerBit(e.Remote, e.RemotePort)
	switch {
	case f.count != nil:
		f.count[b]++
	case len(f.small) < smallPeers:
		f.small = append(f.small, b)
	default:
		f.count = new([peerBits]int32)
		for _, x := range f.small {
			f.count[x]++
		}
		f.count[b]++
		f.small = nil
	}
	f.bits[b/64].Or(1 << (b % 64))
}

// dropPeer uncounts the peer of a socket that has left the 4-tuple index,
// clearing its bit if no other socket needs it. The caller holds pr's
// lock.
func (g *Engine) dropPeer(pr *Port, e *sock.Entry) {
	f := pr.s.peers.Load()
	b := g.peerBit(e.Remote, e.RemotePort)
	left := int32(0)
	if f.count != nil {
		f.count[b]--
		left = f.count[b]
	} else {
		for i, x := range f.small {
			if x == b {
				last := len(f.small) - 1
				f.small[i] = f.small[last]
				f.small = f.small[:last]
				break
			}
		}
		for _, x := range f.small {
			if x == b {
				left++
			}
		}
	}
	if left == 0 {
		f.bits[b/64].And(^(uint64(1) << (b % 64)))
	}
}
