package grow

import (
	"runtime"

	"github.com/udpdemux/udpdemux/lookup"
)

// Lookup returns the Ref of the socket that receives the unicast datagram
// q, and the path it took. It takes no lock and does not allocate.
func (g *Engine) Lookup(q *lookup.Query) (*lookup.Ref, lookup.Path) {
	slot := g.port(q.DstPort)
	if slot == nil {
		return nil, lookup.Primary
	}
	// The sequence count is read before the mark: see scan.
	seq := slot.list.Seq.Peek()
	if n, shared := slot.list.LenMarked(); n <= g.threshold {
		return g.finish(slot, g.scan(slot, q, seq, shared), q), lookup.Primary
	}
	return g.finish(slot, g.indexed(slot, q), q), lookup.Secondary
}

// scan scans slot's chain for q. A 4-tuple match ends the scan, so that
// the entries after it (a connected client's port often holds another)
// stay unread, unless the chain's mark (shared, read after seq, the
// port's sequence count) says that two entries of the port share a
// 4-tuple, or a move was under way. A move that marks the chain does so
// inside the sequence count, before it publishes the entry that shares
// the 4-tuple; so a scan that read no mark and stopped at such an entry
// sees the count changed, and scans the whole chain again.
func (g *Engine) scan(slot *portSlot, q *lookup.Query, seq uint32, shared bool) *lookup.Face {
	b := lookup.Best{}
	if shared || seq&1 != 0 {
		b.ScanPrimary(slot.list.First(), q)
		return b.E
	}
	if b.ScanPrimaryTo4(slot.list.First(), q) && slot.list.Seq.Changed(seq) {
		b = lookup.Best{}
		b.ScanPrimary(slot.list.First(), q)
	}
	return b.E
}

// finish hands a winner in an SO_REUSEPORT group to its flow's member, and
// tries the 127.0.0.6 fallback when nothing matched.
func (g *Engine) finish(slot *portSlot, e *lookup.Face, q *lookup.Query) *lookup.Ref {
	if e == nil {
		if lookup.ToPlaceholder(q) {
			return lookup.PlaceholderFallback(slot.list.First(), q)
		}
		return nil
	}
	return lookup.Receiver(g.flowSeed, e, q)
}

// indexed searches the indexes for q. A move on the port that began or
// ended meanwhile may have hidden the answer, so it searches again, up to
// lookup.ReadTries times, and then once under the port's lock.
func (g *Engine) indexed(slot *portSlot, q *lookup.Query) *lookup.Face {
	for range lookup.ReadTries {
		seq, ok := slot.list.Seq.TryRead()
		if !ok {
			continue
		}
		if e := g.search(slot, q); !slot.list.Seq.Changed(seq) {
			return e
		}
	}
	return g.searchLocked(slot, q)
}

// searchLocked is search under the lock of q's port, which keeps every
// move out of it: the answer of a reader that moves kept from finishing
// otherwise. The lock is released before the caller runs a selector.
func (g *Engine) searchLocked(slot *portSlot, q *lookup.Query) *lookup.Face {
	pr := g.LockPort(q.DstPort)
	e := g.search(slot, q)
	g.unlockRead(pr)
	return e
}

// unlockRead is Unlock for a lookup that took its port's lock because
// writers kept it from finishing, and then yields the processor. The
// writer it kept waiting is the one that keeps moving the port's
// sockets, and Go's scheduler readies that writer on the lookup's
// processor, where it would wait for the end of the lookup goroutine's
// time slice while the lookup's caller looks up on. With lookups busy on
// every CPU, a writer binding and connecting on their port spent most of
// its time waiting so (the runner's resize scenario). The fallback is
// rare, and already the slow path.
func (g *Engine) unlockRead(pr *Port) {
	g.Unlock(pr)
	runtime.Gosched()
}

// search is one search of the indexes for q, which a move on the port
// may spoil: the caller checks the port's sequence count around it.
func (g *Engine) search(slot *portSlot, q *lookup.Query) *lookup.Face {
	b := lookup.Best{}
	if f := slot.peers.Load(); f != nil && f.mayHave(g.peerHash(q.Src, q.SrcPort)) {
		k := connKey{local: q.Dst, remote: q.Src, lport: q.DstPort, rport: q.SrcPort}
		if hd, ok := g.getConn(k); ok {
			// A connected socket bound to the destination beats
			// every unconnected one; a key with one class has
			// one candidate, its newest entry.
			if hd.Rest == nil && lookup.Exact(&hd.First.Face, q) {
				return &hd.First.Face
			}
			offer(&b, hd, q)
			if b.Exact() {
				return b.E
			}
		}
	}
	dev := g.devKeyOf(slot, q.Ifindex)
	g.offerKey(&b, addrKey{q.Dst, q.DstPort, 0}, q)
	if dev != 0 {
		g.offerKey(&b, addrKey{q.Dst, q.DstPort, dev}, q)
	}
	if !b.Exact() && q.Dst != lookup.Wild4 {
		g.offerKey(&b, addrKey{lookup.Wild4, q.DstPort, 0}, q)
		if dev != 0 {
			g.offerKey(&b, addrKey{lookup.Wild4, q.DstPort, dev}, q)
		}
	}
	return b.E
}

// devKeyOf returns the device whose keys of addrs a lookup on slot's port
// of a datagram that arrived on interface ifindex reads, besides those of
// no device: ifindex, or 0 when the port's device filter says that no
// entry is keyed by it, or the datagram has no interface a socket can be
// bound to.
func (g *Engine) devKeyOf(slot *portSlot, ifindex int32) int32 {
	if f := slot.devs.Load(); ifindex <= 0 || f == nil || !f.mayHave(g.devHash(ifindex)) {
		return 0
	}
	return ifindex
}

// offerKey offers the heads of k's classes, if addrs holds k.
func (g *Engine) offerKey(b *lookup.Best, k addrKey, q *lookup.Query) {
	if hd, ok := g.getAddr(k); ok {
		offer(b, hd, q)
	}
}

// offer scores the head of each class of a key.
func offer(b *lookup.Best, hd Val[lookup.Entry], q *lookup.Query) {
	b.Offer(&hd.First.Face, q)
	if hd.Rest != nil {
		for _, e := range *hd.Rest {
			b.Offer(&e.Face, q)
		}
	}
}

// Multicast appends every entry that receives the multicast or broadcast
// datagram q to rs, each once, from a consistent view.
func (g *Engine) Multicast(q *lookup.Query, rs []*lookup.Entry) ([]*lookup.Entry, lookup.Path) {
	slot := g.port(q.DstPort)
	if slot == nil {
		return rs, lookup.Primary
	}
	if slot.list.Len() <= g.threshold {
		for n := slot.list.First(); n != nil; n = n.Next.Load() {
			if e := lookup.OfPrimary(n); lookup.Matches(e, q) {
				rs = append(rs, e)
			}
		}
		return rs, lookup.Primary
	}
	base := len(rs)
	// A move that began or ended meanwhile may have shown a receiver
	// twice or not at all: search again, up to lookup.ReadTries times, and
	// then once under the port's lock.
	for range lookup.ReadTries {
		rs = rs[:base]
		seq, ok := slot.list.Seq.TryRead()
		if !ok {
			continue
		}
		rs = g.multicast(slot, q, rs)
		if !slot.list.Seq.Changed(seq) {
			return rs, lookup.Secondary
		}
	}
	return g.multicastLocked(slot, q, rs[:base]), lookup.Secondary
}

// multicastLocked is multicast under the lock of q's port, as
// searchLocked is search. The caller yields the receivers after.
func (g *Engine) multicastLocked(slot *portSlot, q *lookup.Query, rs []*lookup.Entry) []*lookup.Entry {
	pr := g.LockPort(q.DstPort)
	rs = g.multicast(slot, q, rs)
	g.unlockRead(pr)
	return rs
}

// multicast appends the receivers of q that the indexes hold to rs, in
// one search that a move on the port may spoil.
func (g *Engine) multicast(slot *portSlot, q *lookup.Query, rs []*lookup.Entry) []*lookup.Entry {
	if f := slot.peers.Load(); f != nil && f.mayHave(g.peerHash(q.Src, q.SrcPort)) {
		k := connKey{local: q.Dst, remote: q.Src, lport: q.DstPort, rport: q.SrcPort}
		if hd, ok := g.getConn(k); ok {
			rs = members(rs, heads(hd), q)
		}
	}
	dev := g.devKeyOf(slot, q.Ifindex)
	rs = g.membersOf(rs, addrKey{q.Dst, q.DstPort, 0}, q)
	if dev != 0 {
		rs = g.membersOf(rs, addrKey{q.Dst, q.DstPort, dev}, q)
	}
	if q.Dst != lookup.Wild4 {
		rs = g.membersOf(rs, addrKey{lookup.Wild4, q.DstPort, 0}, q)
		if dev != 0 {
			rs = g.membersOf(rs, addrKey{lookup.Wild4, q.DstPort, dev}, q)
		}
	}
	return rs
}

// membersOf appends the members of k's classes that match q, if addrs
// holds k.
func (g *Engine) membersOf(rs []*lookup.Entry, k addrKey, q *lookup.Query) []*lookup.Entry {
	if hd, ok := g.getAddr(k); ok {
		rs = members(rs, heads(hd), q)
	}
	return rs
}

// members appends every member of the classes of hd that matches q.
func members(rs []*lookup.Entry, hd heads, q *lookup.Query) []*lookup.Entry {
	for i := range hd.len() {
		if !lookup.Matches(hd.at(i), q) {
			continue // a class matches or not as a whole
		}
		for n := &hd.at(i).N2; n != nil; n = n.Next.Load() {
			rs = append(rs, lookup.OfSecondary(n))
		}
	}
	return rs
}

// getConn returns the heads of k in conns, checking the keys of its
// line's positions inline.
func (g *Engine) getConn(k connKey) (Val[lookup.Entry], bool) {
	h := g.connHash(&k)
	p := g.conns.Probe(h)
	for b := p.Tagged(); b != 0; b &= b - 1 {
		if e := p.At(b); e != nil && connIs(e, k) {
			return Val[lookup.Entry]{First: e}, true
		}
	}
	return p.Chained(h, k)
}

// getAddr returns the heads of k in addrs, as getConn does in conns. The
// two are written out, not one generic function given the key check:
// that function's body is over Go's inlining budget, so the check would be
// an indirect call again.
func (g *Engine) getAddr(k addrKey) (Val[lookup.Entry], bool) {
	h := g.addrHash(k)
	p := g.addrs.Probe(h)
	for b := p.Tagged(); b != 0; b &= b - 1 {
		if e := p.At(b); e != nil && addrIs(e, k) {
			return Val[lookup.Entry]{First: e}, true
		}
	}
	return p.Chained(h, k)
}
