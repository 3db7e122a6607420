package grow

import (
	"fmt"
	"math/bits"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lookup"
)

// Verify checks the engine's invariants, calling bad for each violation:
// every entry on a port's chain is its socket's current state and the
// member of exactly one class, under its own key, in the index its state
// calls for; classes are newest first and their heads are in the index;
// no index holds an entry that is on no port; the port's peer filter,
// summary, groups and count of shared 4-tuples (with its chain's mark)
// match its entries. Call it when no write is in flight. It returns the
// entries on the ports' chains.
func (g *Engine) Verify(bad func(format string, args ...any)) map[*lookup.Entry]bool {
	onPort := map[*lookup.Entry]bool{}
	g.records(bad, func(pr *Port) {
		p := pr.port
		if pr.s.list.Seq.Moving() {
			bad("port %d: move in progress", p)
		}
		var want bind.Summary
		var peers []uint64
		groups := map[groupKey][]*lookup.Entry{}
		tuples := map[connKey]int{}
		n := 0
		var devs []uint64
		for x := pr.s.list.First(); x != nil; x = x.Next.Load() {
			e := lookup.OfPrimary(x)
			n++
			if byDevice(e) {
				devs = append(devs, g.devHash(e.Device))
			}
			if e.Port != p {
				bad("port %d holds an entry of port %d", p, e.Port)
			}
			if onPort[e] {
				bad("entry %v:%d twice on the ports", e.LocalAddr(), e.Port)
			}
			onPort[e] = true
			if e.Sock().Closed.Load() || e.Sock().Cur.Load() != e {
				bad("entry %v:%d is not its socket's current state", e.LocalAddr(), e.Port)
			}
			if inConns(e) {
				peers = append(peers, g.peerHash(e.Remote, e.RemotePort))
				tuples[connKeyOf(e)]++
			}
			want.Add(e, 1)
			if e.Group != nil {
				if e.Has(lookup.Connected) {
					// Lookup4 takes a 4-tuple match without a flow hash.
					bad("connected entry %v:%d in an SO_REUSEPORT group", e.LocalAddr(), e.Port)
				}
				groups[groupOf(e)] = append(groups[groupOf(e)], e)
			} else if e.Has(lookup.ReusePort) && !e.Has(lookup.Connected) {
				bad("entry %v:%d has no group", e.LocalAddr(), e.Port)
			}
			if !g.inClass(e) {
				bad("entry %v:%d is not in its index", e.LocalAddr(), e.Port)
			}
		}
		if n == 0 {
			bad("port %d: empty record kept", p)
		}
		if n != pr.s.list.Len() {
			bad("port %d: count %d, chain %d", p, pr.s.list.Len(), n)
		}

		verifyPeers(p, "peer", pr.s.peers.Load(), peers, bad)
		verifyPeers(p, "device", pr.s.devs.Load(), devs, bad)
		var shared int32
		for _, k := range tuples {
			if k > 1 {
				shared++
			}
		}
		if _, marked := pr.s.list.LenMarked(); shared != pr.shared4 || marked != (shared > 0) {
			bad("port %d: %d shared 4-tuples, counted %d, chain marked %v", p, shared, pr.shared4, marked)
		}
		if pr.cc != nil && !want.Equal(pr.cc) {
			bad("port %d: bind-check summary differs from its sockets", p)
		}
		if len(groups) != len(pr.groups) {
			bad("port %d: %d groups, %d expected", p, len(pr.groups), len(groups))
		}
		for k, ms := range groups {
			grp := pr.groups[k]
			if grp == nil || grp.Len() != len(ms) {
				bad("port %d: group of %d members wrong", p, len(ms))
				continue
			}
			for _, m := range ms {
				if m.Group != grp {
					bad("port %d: member of another group", p)
				}
			}
			grp.Verify(fmt.Sprintf("port %d: group of %v", p, ms[0].LocalAddr()), bad)
		}
	})
	if err := g.addrs.Check(); err != nil {
		bad("address index: %v", err)
	}
	if err := g.conns.Check(); err != nil {
		bad("4-tuple index: %v", err)
	}
	check := func(what string, hd heads) {
		for i := range hd.len() {
			prevSeq := ^uint64(0)
			for x := &hd.at(i).N2; x != nil; x = x.Next.Load() {
				e := lookup.OfSecondary(x)
				if !onPort[e] {
					bad("%s holds %v:%d, which is on no port", what, e.LocalAddr(), e.Port)
				}
				if !sameClass(e, hd.at(i)) || e.Seq > prevSeq {
					bad("%s: class of %v:%d out of order or mixed", what, e.LocalAddr(), e.Port)
				}
				prevSeq = e.Seq
			}
		}
	}
	g.addrs.All(func(v Val[lookup.Entry]) bool {
		check(fmt.Sprintf("address index %v", addrKeyOf(v.First)), heads(v))
		return true
	})
	g.conns.All(func(v Val[lookup.Entry]) bool {
		check(fmt.Sprintf("4-tuple index %v", connKeyOf(v.First)), heads(v))
		return true
	})
	return onPort
}

// inClass reports whether e is in the class chain of its key.
func (g *Engine) inClass(e *lookup.Entry) bool {
	var hd Val[lookup.Entry]
	var ok bool
	if inConns(e) {
		k := connKeyOf(e)
		hd, ok = g.conns.Get(g.connHash(&k), k)
	} else {
		k := addrKeyOf(e)
		hd, ok = g.addrs.Get(g.addrHash(k), k)
	}
	if !ok {
		return false
	}
	for i := range heads(hd).len() {
		var prev *lookup.Node
		for x := &heads(hd).at(i).N2; x != nil; x = x.Next.Load() {
			if x.Prev != prev {
				return false // broken back link
			}
			if lookup.OfSecondary(x) == e {
				return true
			}
			prev = x
		}
	}
	return false
}

// verifyPeers checks port p's filter f of what (peers or devices) against
// the hashes of what its entries need there: it counts each, and a bit is
// set exactly when one needs it (or its count reached maxCount and
// sticks).
func verifyPeers(p uint16, what string, f *peerFilter, peers []uint64, bad func(format string, args ...any)) {
	if f == nil {
		if len(peers) > 0 {
			bad("port %d: %ss to filter and no %s filter", p, what, what)
		}
		return
	}
	if f.size() < minPeerBits || f.size()&(f.size()-1) != 0 || f.shift != uint(64-bits.TrailingZeros(uint(f.size()))) {
		bad("port %d: %s filter of %d bits, shift %d", p, what, f.size(), f.shift)
		return
	}
	if f.n != len(peers) {
		bad("port %d: the %s filter counts %d, the port has %d", p, what, f.n, len(peers))
	}
	want := make([]int, f.size())
	for _, h := range peers {
		want[h>>f.shift]++
	}
	have := make([]int, f.size())
	switch {
	case f.count != nil:
		if f.small != nil || len(f.count) != f.size() {
			bad("port %d: %s filter with a list and counts, or counts of another size", p, what)
			return
		}
		for b, c := range f.count {
			have[b] = int(c)
		}
	case f.size() != minPeerBits || len(f.small) > smallPeers:
		bad("port %d: %s list of %d in a filter of %d bits", p, what, len(f.small), f.size())
		return
	default:
		for _, b := range f.small {
			have[b]++
		}
	}
	for b := range want {
		stuck := f.count != nil && have[b] == maxCount
		if have[b] != want[b] && !stuck {
			bad("port %d: %s filter bit %d counts %d, the port has %d", p, what, b, have[b], want[b])
		}
		if set := f.bits[b/64].Load()&(1<<(b%64)) != 0; set != (want[b] > 0 || stuck) {
			bad("port %d: %s filter bit %d is %v, with %d", p, what, b, set, want[b])
		}
	}
}

// records calls f with each port's record, after checking that the
// record belongs to its slot and is live, that a slot without one holds
// no entry, and that the counts of records and pages are right.
func (g *Engine) records(bad func(format string, args ...any), f func(*Port)) {
	nport, npage := 0, 0
	for hi := range g.pages {
		pg := g.pages[hi].Load()
		if pg == nil {
			continue
		}
		npage++
		for lo := range pg.slots {
			p := uint16(hi<<8 | lo)
			s := &pg.slots[lo]
			pr := pg.recs[lo].Load()
			switch {
			case pr == nil:
				if s.list.Len() != 0 || s.list.First() != nil {
					bad("port %d: a slot with entries and no record", p)
				}
				continue
			case pr.s != s || pr.port != p:
				bad("port %d: its record is not its slot's", p)
			case pr.dead:
				bad("port record %d: dead", p)
			}
			nport++
			f(pr)
		}
	}
	if int(g.nport.Load()) != nport || int(g.npage.Load()) != npage {
		bad("%d ports and %d pages counted, %d and %d made", g.nport.Load(), g.npage.Load(), nport, npage)
	}
}
