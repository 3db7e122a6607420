package grow

import (
	"math/bits"
	"slices"
	"sync/atomic"

	"github.com/udpdemux/udpdemux/lookup"
)

// Sizes of a port's peer filter.
const (
	// minPeerBits is the size of a new filter, a power of two.
	minPeerBits = 512
	// smallPeers is how many peers a filter keeps in a list before it
	// switches to counts per bit.
	smallPeers = 64
	// A filter grows fourfold when it holds more than one peer per
	// minBitsPerPeer bits, and shrinks fourfold below one peer per
	// maxBitsPerPeer bits, so that it keeps between 4 and 64 bits a peer
	// (16 after a resize): at least three sources in four that have no
	// socket find their bit clear, and the filter takes at most 64 bytes
	// of counts a peer.
	minBitsPerPeer = 4
	maxBitsPerPeer = 64
	// rebuildFactor bounds the cost of a resize, which recounts the peers
	// from the port's chain: a filter resizes only while the chain holds
	// at most rebuildFactor entries a peer, so that a resize costs O(1)
	// amortised over the connects and closes since the last.
	rebuildFactor = 8
	// maxCount is where a bit's count stops: a bit that reaches it stays
	// set until the next resize recounts it, which only makes its peers
	// probe the index.
	maxCount = 255
)

// peerFilter says which sources may have a socket of the port in the
// 4-tuple index: a one-hash Bloom filter of the peers of those sockets.
// A lookup from a source whose bit is clear skips the 4-tuple index,
// whose probe lands at random in a table of every connected socket of the
// host. That spares a cache miss per datagram to a server port that holds
// a few connected sockets and takes datagrams from everywhere else (a DNS
// or QUIC server's); with 8 peers, 1.6 % of other sources still probe. The
// filter grows with the port's peers, so that a port with 100 000 connected
// sockets still turns most other sources away.
//
// A bit is set before the socket that needs it is published and cleared
// after the last socket that needed it is unpublished, so the filter never
// hides a socket that stays in the index. A resize builds a new filter
// from every peer of the port and publishes it whole, under the port's
// lock: a lookup reads one filter or the other, and each has the bits of
// every socket published before it.
type peerFilter struct {
	// shift selects a peer's bit: the top bits of its hash. It follows
	// from len(bits), and is kept so that a lookup does not count zeros.
	shift uint
	// bits is read by lookups: len(bits)*64 is a power of two, at least
	// minPeerBits.
	bits []atomic.Uint64

	// Guarded by the port's lock: how many peers are counted, and the
	// bit of each while a filter of minPeerBits holds at most smallPeers
	// of them, else counts per bit.
	n     int
	small []uint16
	count []uint8
}

// newPeerFilter returns an empty filter of size bits.
func newPeerFilter(size int) *peerFilter {
	return &peerFilter{
		shift: uint(64 - bits.TrailingZeros(uint(size))),
		bits:  make([]atomic.Uint64, size/64),
	}
}

// size returns the number of bits of f.
func (f *peerFilter) size() int { return len(f.bits) * 64 }

// peerHash returns the hash of a peer, whose top bits select its bit in a
// filter. Its multiplier is secret: an outsider who aims sources at set
// bits only makes them probe the index, as every lookup did without the
// filter.
func (g *Engine) peerHash(a lookup.Addr16, port uint16) uint64 {
	return (a.Lo ^ bits.RotateLeft64(a.Hi, 31) ^ uint64(port)<<48) * g.mulC
}

// mayHave reports whether the bit of the peer whose hash is h is set.
func (f *peerFilter) mayHave(h uint64) bool {
	b := h >> (f.shift & 63) // shift ≤ 55 (minPeerBits); &63 spares the guard
	return f.bits[b/64].Load()&(1<<(b%64)) != 0
}

// add counts the peer whose hash is h and sets its bit.
func (f *peerFilter) add(h uint64) {
	b := h >> (f.shift & 63)
	if f.count == nil && (len(f.small) == smallPeers || f.size() > minPeerBits) {
		f.count = make([]uint8, f.size())
		for _, x := range f.small {
			f.count[x]++
		}
		f.small = nil
	}
	if f.count == nil {
		f.small = append(f.small, uint16(b))
	} else if f.count[b] < maxCount {
		f.count[b]++
	}
	f.n++
	f.bits[b/64].Or(1 << (b % 64))
}

// remove uncounts the peer whose hash is h, clearing its bit if no other
// peer needs it.
func (f *peerFilter) remove(h uint64) {
	b := h >> (f.shift & 63)
	var needed bool
	if f.count != nil {
		if f.count[b] < maxCount {
			f.count[b]--
		}
		needed = f.count[b] != 0
	} else {
		if i := slices.Index(f.small, uint16(b)); i >= 0 {
			last := len(f.small) - 1
			f.small[i] = f.small[last]
			f.small = f.small[:last]
		}
		needed = slices.Contains(f.small, uint16(b))
	}
	f.n--
	if !needed {
		f.bits[b/64].And(^(uint64(1) << (b % 64)))
	}
}

// A port keeps two filters of one kind: of the peers of its entries in the
// 4-tuple index (peerKind), and of the devices of its entries keyed by a
// device in the address index (deviceKind); no entry is counted in both. A lookup of a datagram whose
// interface has no such entry on the port then skips the device's keys.
type filterKind struct {
	// of returns the filter's place in a port's slot.
	of func(*portSlot) *atomic.Pointer[peerFilter]
	// hash returns the hash of what an entry counts in the filter.
	hash func(*Engine, *lookup.Entry) uint64
	// in reports whether an entry is counted in the filter.
	in func(*lookup.Entry) bool
}

var (
	peerKind = filterKind{
		of:   func(s *portSlot) *atomic.Pointer[peerFilter] { return &s.peers },
		hash: func(g *Engine, e *lookup.Entry) uint64 { return g.peerHash(e.Remote, e.RemotePort) },
		in:   inConns,
	}
	deviceKind = filterKind{
		of:   func(s *portSlot) *atomic.Pointer[peerFilter] { return &s.devs },
		hash: func(g *Engine, e *lookup.Entry) uint64 { return g.devHash(e.Device) },
		in:   byDevice,
	}
)

// devHash returns the hash of a device for a port's device filter, keyed
// by a secret as peerHash is.
func (g *Engine) devHash(dev int32) uint64 { return fold(uint64(uint32(dev))^g.seed, g.mulC) }

// add counts in pr's filter of kind k what e, an entry about to be
// published, needs there, if k counts e; the caller holds pr's lock.
func (k filterKind) add(g *Engine, pr *Port, e *lookup.Entry) {
	if !k.in(e) {
		return
	}
	at := k.of(pr.s)
	f := at.Load()
	if f == nil {
		f = newPeerFilter(minPeerBits)
		at.Store(f)
	}
	if n := f.n + 1; n*minBitsPerPeer > f.size() && g.rebuildable(pr, n) {
		k.rebuild(g, pr, f.size()*4, e)
		return
	}
	f.add(k.hash(g, e))
}

// drop uncounts in pr's filter of kind k what e needed there, if k counts
// e, once e has left its index and pr's chain, clearing its bit if no
// other entry needs it. The caller holds pr's lock.
func (k filterKind) drop(g *Engine, pr *Port, e *lookup.Entry) {
	if !k.in(e) {
		return
	}
	f := k.of(pr.s).Load()
	if n := f.n - 1; f.size() > minPeerBits && n*maxBitsPerPeer < f.size() && g.rebuildable(pr, n) {
		k.rebuild(g, pr, f.size()/4, nil)
		return
	}
	f.remove(k.hash(g, e))
}

// rebuildable reports whether a filter of n peers may be rebuilt from pr's
// chain at O(1) amortised cost.
func (g *Engine) rebuildable(pr *Port, n int) bool {
	return pr.s.list.Len() <= rebuildFactor*max(n, smallPeers)
}

// rebuild publishes a filter of kind k of size bits that counts the
// entries of pr's chain that k counts, and e if e is not nil (an entry
// about to be published).
func (k filterKind) rebuild(g *Engine, pr *Port, size int, e *lookup.Entry) {
	f := newPeerFilter(max(size, minPeerBits))
	for n := pr.s.list.First(); n != nil; n = n.Next.Load() {
		if x := lookup.OfPrimary(n); k.in(x) {
			f.add(k.hash(g, x))
		}
	}
	if e != nil {
		f.add(k.hash(g, e))
	}
	k.of(pr.s).Store(f)
}
