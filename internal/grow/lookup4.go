package grow

import (
	"net/netip"

	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// Lookup4 is Lookup for the datagram from src to dst, both IPv4 (Is4),
// that arrived on interface ifindex. It reports false, without a lookup,
// if no socket could receive the datagram (see Tuple4.Init); Query.Init
// would refuse it too. It gives Lookup's answer and path, takes no lock
// and does not allocate.
//
// A datagram from a connected socket's peer, the common case on a port
// that has connected sockets, is settled here, from the datagram's
// addresses and ports held as scalars, with no further call, since each
// call of the general search on the way measurably slowed those lookups;
// the rest go to scan4 or indexed4. (demux's Lookup cannot build the
// Tuple4 itself, inline: an instantiated generic function inlines no
// function of a package that its instantiating package does not import.)
func (g *Engine) Lookup4(src, dst netip.AddrPort, ifindex int, q *lookup.Query) (*sock.Ref, lookup.Path, bool) {
	s4, d4 := lookup.V4(src.Addr()), lookup.V4(dst.Addr())
	sport, dport, dev := src.Port(), dst.Port(), lookup.Device(ifindex)
	if d4 == 0 || dport == 0 {
		return nil, lookup.Primary, false
	}
	// t is filled in field by field where it is needed: a composite
	// literal went through a temporary, whose copy, one 16-byte load of
	// five smaller stores, the processor could not forward from them,
	// and lookups from unknown peers stalled on it.
	var t lookup.Tuple4
	slot := g.port(dport)
	if slot == nil {
		return nil, lookup.Primary, true
	}
	seq := slot.list.Seq.Peek()
	if n, shared := slot.list.LenMarked(); n <= g.threshold {
		t.Src, t.Dst, t.SrcPort, t.DstPort, t.Ifindex = s4, d4, sport, dport, dev
		return g.scan4(slot, seq, shared, &t, q), lookup.Primary, true
	}
	rem := sock.Map4(s4)
	f := slot.peers.Load()
	peer := f != nil && f.mayHave(g.peerHash(rem, sport))
	if peer {
		// As in indexed, a 4-tuple match bound to the destination, with
		// a key of one class, is taken at once, whatever the port's
		// moves: it beats every other candidate, and belongs to no
		// SO_REUSEPORT group, as no connected entry does (Verify checks
		// it). A key whose value sits in a position of its line has one
		// class; indexed4 settles the rest (a key in the line's chain, a
		// match not bound to the destination).
		p := g.conns.Probe(g.connHash4(d4, s4, dport, sport))
		for b := p.Tagged(); b != 0; b &= b - 1 {
			if e := p.At(b); e != nil && e.Port == dport && e.RemotePort == sport && e.Remote == rem && keyIs4(e, d4) {
				if lookup.ExactTo(&e.Face, d4, dev) {
					return &e.Ref, lookup.Secondary, true
				}
				break
			}
		}
	}
	t.Src, t.Dst, t.SrcPort, t.DstPort, t.Ifindex = s4, d4, sport, dport, dev
	return g.indexed4(slot, seq, peer, &t, q), lookup.Secondary, true
}

// lookupTuple4 is Lookup4 for the deliverable IPv4 datagram t.
func (g *Engine) lookupTuple4(t *lookup.Tuple4, q *lookup.Query) (*sock.Ref, lookup.Path) {
	slot := g.port(t.DstPort)
	if slot == nil {
		return nil, lookup.Primary
	}
	seq := slot.list.Seq.Peek()
	if n, shared := slot.list.LenMarked(); n <= g.threshold {
		return g.scan4(slot, seq, shared, t, q), lookup.Primary
	}
	f := slot.peers.Load()
	peer := f != nil && f.mayHave(g.peerHash(sock.Map4(t.Src), t.SrcPort))
	return g.indexed4(slot, seq, peer, t, q), lookup.Secondary
}

// scan4 is scan and finish for the IPv4 datagram t to the port of slot, whose
// sequence count Peek read as seq before LenMarked read shared.
func (g *Engine) scan4(slot *portSlot, seq uint32, shared bool, t *lookup.Tuple4, q *lookup.Query) *sock.Ref {
	q.Set4(t)
	return g.finish(slot, g.scan(slot, q, seq, shared), q)
}

// indexed4 is indexed and finish for the IPv4 datagram t to the indexed
// port of slot, whose sequence count Peek read as seq; peer reports whether
// the port's peer filter may hold t's source. Most IPv4 datagrams to an
// indexed port are settled by the newest entry of one key: a connected
// socket's 4-tuple, the destination address, or the wildcard. indexed4
// settles those from t alone, and fills q in from t for what needs the
// general search: a key with several classes, a wildcard-tier candidate
// under the destination's key, a move under way, an SO_REUSEPORT group's
// flow hash, or the 127.0.0.6 fallback.
func (g *Engine) indexed4(slot *portSlot, seq uint32, peer bool, t *lookup.Tuple4, q *lookup.Query) *sock.Ref {
	if peer {
		// As in Lookup4: a 4-tuple match bound to the destination, with
		// a key of one class, is taken at once.
		if hd, ok := g.getConn4(t.Dst, t.Src, t.DstPort, t.SrcPort); ok {
			if hd.Rest == nil && lookup.Exact4(&hd.First.Face, t) {
				return &hd.First.Ref
			}
			q.Set4(t)
			return g.finish(slot, g.indexed(slot, q), q)
		}
	}
	if e, ok := g.search4(slot, t, seq); ok {
		if e != nil && e.Group == nil {
			return &e.Ref
		}
		if e == nil && t.Dst != ipv6.Placeholder4 {
			return nil
		}
		q.Set4(t)
		return g.finish(slot, e, q)
	}
	q.Set4(t)
	return g.finish(slot, g.indexed(slot, q), q)
}

// search4 is indexed for an IPv4 datagram that no connected socket's
// 4-tuple took (indexed4 tried those), where each key it reads has one
// class. It reports false, and the caller runs indexed, where it cannot
// tell the answer so: a key with several classes, a candidate of the
// destination's key that is not bound to it, or a count of slot's moves
// (seq, as Peek read it) that was odd or changed. As in indexed, an
// answer is taken only if no move began or ended meanwhile.
func (g *Engine) search4(slot *portSlot, t *lookup.Tuple4, seq uint32) (*sock.Face, bool) {
	if seq&1 != 0 {
		return nil, false
	}
	var e *sock.Face
	dev := g.devKeyOf(slot, t.Ifindex)
	if hd, ok, one := g.getAddrs4(addrKey{sock.Map4(t.Dst), t.DstPort, 0}, dev); !one {
		return nil, false
	} else if ok {
		if hd.Rest != nil {
			return nil, false
		}
		// A class matches as a whole, so a key whose one class does not
		// match is as good as absent.
		if s := lookup.Score4(&hd.First.Face, t); lookup.ExactScore(s) {
			e = &hd.First.Face
		} else if s >= 0 {
			// No entry reaches this today: one stored under an IPv4
			// address's key is bound to that address. The general
			// search keeps the answer right should keying change.
			return nil, false
		}
	}
	if e == nil {
		if hd, ok, one := g.getAddrs4(addrKey{sock.Wild4, t.DstPort, 0}, dev); !one {
			return nil, false
		} else if ok {
			if hd.Rest != nil {
				return nil, false
			}
			if lookup.Score4(&hd.First.Face, t) >= 0 {
				e = &hd.First.Face
			}
		}
	}
	return e, !slot.list.Seq.Changed(seq)
}

// getAddrs4 returns the heads of k, a key of no device, or, if dev is not
// 0, of k keyed by dev, for search4: it reports one false when both keys
// are held, a case search4 leaves to the general search.
func (g *Engine) getAddrs4(k addrKey, dev int32) (hd Val[sock.Entry], ok, one bool) {
	hd, ok = g.getAddr(k)
	if dev == 0 {
		return hd, ok, true
	}
	k.dev = dev
	hdd, okd := g.getAddr(k)
	if !okd {
		return hd, ok, true
	}
	return hdd, true, !ok
}

// keyIs4 reports whether e's local key is the IPv4 address v4.
func keyIs4(e *sock.Entry, v4 uint32) bool {
	if e.Flags&sock.Is6 == 0 {
		return e.V4 == v4
	}
	if e.V6 == sock.Wild6 {
		return v4 == 0
	}
	return e.V6 == sock.Map4(v4)
}

// getConn4 is getConn for the IPv4 4-tuple local:lport, remote:rport.
func (g *Engine) getConn4(local, remote uint32, lport, rport uint16) (Val[sock.Entry], bool) {
	h := g.connHash4(local, remote, lport, rport)
	p := g.conns.Probe(h)
	rem := sock.Map4(remote)
	for t := p.Tagged(); t != 0; t &= t - 1 {
		if e := p.At(t); e != nil && e.Port == lport && e.RemotePort == rport && e.Remote == rem && keyIs4(e, local) {
			return Val[sock.Entry]{First: e}, true
		}
	}
	return p.Chained(h, connKey{local: sock.Map4(local), remote: rem, lport: lport, rport: rport})
}
