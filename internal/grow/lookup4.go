package grow

import (
	"net/netip"

	"github.com/udpdemux/udpdemux/lookup"
)

// Lookup4 is Lookup for the datagram from src to dst, both IPv4 (Is4),
// that arrived on interface ifindex. It reports false, without a lookup,
// if no socket could receive the datagram (see Tuple4.Init); Query.Init
// would refuse it too. It gives Lookup's answer and path, takes no lock
// and does not allocate. (demux's Lookup cannot build the Tuple4 itself,
// inline: an instantiated generic function inlines no function of a
// package that its instantiating package does not import.)
func (g *Engine) Lookup4(src, dst netip.AddrPort, ifindex int, q *lookup.Query) (*lookup.Ref, lookup.Path, bool) {
	d4, dport := lookup.V4(dst.Addr()), dst.Port()
	if d4 == 0 || dport == 0 {
		return nil, lookup.Primary, false
	}
	r, p := g.lookup4(lookup.V4(src.Addr()), d4, src.Port(), dport, lookup.Device(ifindex), q)
	return r, p, true
}

// lookup4 is Lookup4 for the deliverable IPv4 datagram from s4:sport to
// d4:dport that arrived on dev, the Ifindex of its interface. Most IPv4
// datagrams to an indexed port are settled by the newest entry of one
// key: a connected socket's 4-tuple, the destination address, or the
// wildcard. lookup4 settles those from the datagram alone (the 4-tuple
// here, the others in exact4 and search4), and fills q in for what needs
// the general search: a key with several classes, a wildcard-tier
// candidate under the destination's key, a move under way, an
// SO_REUSEPORT group's flow hash, or the 127.0.0.6 fallback.
//
// It takes the datagram as scalars, not as a Tuple4: the 4-tuple's hash
// reads two neighbouring fields of a Tuple4 as one word, a load that the
// two smaller stores just made to them cannot forward to, and a known
// peer's lookup stalled on it.
func (g *Engine) lookup4(s4, d4 uint32, sport, dport uint16, dev int32, q *lookup.Query) (*lookup.Ref, lookup.Path) {
	slot := g.port(dport)
	if slot == nil {
		return nil, lookup.Primary
	}
	seq := slot.list.Seq.Peek()
	if n, shared := slot.list.LenMarked(); n <= g.threshold {
		q.Set4(s4, d4, sport, dport, dev)
		return g.finish(slot, g.scan(slot, q, seq, shared), q), lookup.Primary
	}
	general := false
	rem := lookup.Map4(s4)
	if f := slot.peers.Load(); f != nil && f.mayHave(g.peerHash(rem, sport)) {
		// A known peer's datagram, the common case on a port that has
		// connected sockets, is settled here with no further call. As
		// in search, a 4-tuple match bound to the destination, with a
		// key of one class, is taken at once, whatever the port's
		// moves: it beats every other candidate, and belongs to no
		// SO_REUSEPORT group, as no connected entry does (Verify checks
		// it). A key whose value sits in a position of its line has one
		// class. Any other match is the general search's.
		h := g.connHash4(d4, s4, dport, sport)
		p := g.conns.Probe(h)
		hd, ok := Val[lookup.Entry]{}, false
		for b := p.Tagged(); b != 0; b &= b - 1 {
			if e := p.At(b); e != nil && e.Port == dport && e.RemotePort == sport && e.Remote == rem && keyIs4(e, d4) {
				hd, ok = Val[lookup.Entry]{First: e}, true
				break
			}
		}
		if !ok {
			hd, ok = p.Chained(h, connKey{local: lookup.Map4(d4), remote: rem, lport: dport, rport: sport})
		}
		if ok && hd.Rest == nil && lookup.ExactTo(&hd.First.Face, d4, dev) {
			return &hd.First.Ref, lookup.Secondary
		}
		general = ok
	}
	if !general {
		// The device whose keys search4 reads besides those of no
		// device; exact4 reads only the latter, so it leaves a port
		// whose device filter may hold dev to search4.
		dk := g.devKeyOf(slot, dev)
		absent := false
		if dk == 0 {
			var e *lookup.Entry
			if e, absent = g.exact4(slot, d4, dport, seq); e != nil {
				return &e.Ref, lookup.Secondary
			}
		}
		// Field by field: a composite literal is built in a temporary
		// and copied with one 16-byte load of its five stores, which
		// they cannot forward to.
		var t lookup.Tuple4
		t.Src, t.Dst, t.SrcPort, t.DstPort, t.Ifindex = s4, d4, sport, dport, dev
		if e, ok := g.search4(slot, &t, seq, dk, absent); ok {
			if e != nil && e.Group == nil {
				return &e.Ref, lookup.Secondary
			}
			if e == nil && d4 != lookup.Placeholder4 {
				return nil, lookup.Secondary
			}
			q.Set4(s4, d4, sport, dport, dev)
			return g.finish(slot, e, q), lookup.Secondary
		}
	}
	q.Set4(s4, d4, sport, dport, dev)
	return g.finish(slot, g.indexed(slot, q), q), lookup.Secondary
}

// exact4 is search4's commonest answer in fewer steps, for a port whose
// device filter does not hold the datagram's interface: an unconnected
// entry bound to d4:dport on no device and in no SO_REUSEPORT group, the
// head of its key's one class, which beats every other candidate. It
// reads the key of no device of d4:dport as getAddr does, its line's
// positions, then its chain, and returns the entry in a position if it is
// that answer and slot's count of moves (seq, as Peek read it) was even
// and has not changed. Otherwise it returns nil, and absent true if the
// key was in neither place; lookup4 then runs search4, told so, which
// answers as it would have without exact4, without reading the key again.
// The lookup's cost is the line and the entry: with fewer instructions
// between one lookup's loads and the next one's, the processor overlaps
// more of their cache misses than search4's calls let it (the runner's
// scale-default scenario compares).
func (g *Engine) exact4(slot *portSlot, d4 uint32, dport uint16, seq uint32) (e *lookup.Entry, absent bool) {
	if seq&1 != 0 {
		return nil, false
	}
	h := g.addrHash4(d4, dport)
	p := g.addrs.Probe(h)
	for b := p.Tagged(); b != 0; b &= b - 1 {
		e := p.At(b)
		if e == nil || e.Port != dport || e.Device != 0 || !keyIs4(e, d4) {
			continue
		}
		// A key in a position has one class. Its head is in the exact
		// tier (search4's Score4) if it is bound to d4, on no device,
		// and unconnected (a connected one would have to be the
		// datagram's peer's: none is stored under an address's key
		// today).
		if e.Flags&lookup.Connected == 0 && lookup.ExactTo(&e.Face, d4, 0) && e.Group == nil &&
			!slot.list.Seq.Changed(seq) {
			return e, false
		}
		return nil, false
	}
	_, ok := p.Chained(h, addrKey{lookup.Map4(d4), dport, 0})
	return nil, !ok
}

// search4 is indexed for an IPv4 datagram that no connected socket's
// 4-tuple took (lookup4 tried those), where each key it reads has one
// class. It reports false, and the caller runs indexed, where it cannot
// tell the answer so: a key with several classes, a candidate of the
// destination's key that is not bound to it, or a count of slot's moves
// (seq, as Peek read it) that was odd or changed. As in indexed, an
// answer is taken only if no move began or ended meanwhile. dev is the
// device whose keys it reads besides those of no device (devKeyOf), and
// absent, given only with dev 0, says that exact4 found the
// destination's key of no device in neither place after seq was read,
// which search4 then does not read again.
func (g *Engine) search4(slot *portSlot, t *lookup.Tuple4, seq uint32, dev int32, absent bool) (*lookup.Face, bool) {
	if seq&1 != 0 {
		return nil, false
	}
	var e *lookup.Face
	hd, ok, one := Val[lookup.Entry]{}, false, true
	if !absent {
		hd, ok, one = g.getAddrs4(t.Dst, t.DstPort, dev)
	}
	if !one {
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
		if hd, ok, one := g.getAddrs4(0, t.DstPort, dev); !one {
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

// getAddrs4 returns the heads of the key of the IPv4 address v4 (0: the
// wildcard) and port, of no device, or, if dev is not 0, of that key
// keyed by dev, for search4: it reports one false when both keys are
// held, a case search4 leaves to the general search.
func (g *Engine) getAddrs4(v4 uint32, port uint16, dev int32) (hd Val[lookup.Entry], ok, one bool) {
	hd, ok = g.getAddr4(v4, port)
	if dev == 0 {
		return hd, ok, true
	}
	hdd, okd := g.getAddr(addrKey{lookup.Map4(v4), port, dev})
	if !okd {
		return hd, ok, true
	}
	return hdd, true, !ok
}

// keyIs4 reports whether e's local key is the IPv4 address v4.
func keyIs4(e *lookup.Entry, v4 uint32) bool {
	if e.Flags&lookup.Is6 == 0 {
		return e.V4 == v4
	}
	if e.V6 == lookup.Wild6 {
		return v4 == 0
	}
	return e.V6 == lookup.Map4(v4)
}

// getAddr4 is getAddr of the key of the IPv4 address v4 (0: the
// wildcard) and port, of no device.
func (g *Engine) getAddr4(v4 uint32, port uint16) (Val[lookup.Entry], bool) {
	h := g.addrHash4(v4, port)
	p := g.addrs.Probe(h)
	for b := p.Tagged(); b != 0; b &= b - 1 {
		if e := p.At(b); e != nil && e.Port == port && e.Device == 0 && keyIs4(e, v4) {
			return Val[lookup.Entry]{First: e}, true
		}
	}
	return p.Chained(h, addrKey{lookup.Map4(v4), port, 0})
}
