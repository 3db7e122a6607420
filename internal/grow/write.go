package grow

import (
	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lookup"
)

// groupKey says which SO_REUSEPORT group an unconnected ReusePort entry
// joins: same address, port (that of its record), device, family, V6Only
// and owner.
type groupKey struct {
	v4    uint32
	v6    lookup.Addr16
	dev   int32
	owner uint32
	flags uint8
}

func groupOf(e *lookup.Entry) groupKey {
	return groupKey{e.V4, e.V6, e.Device, e.Owner, e.Flags & (lookup.Is6 | lookup.V6Only)}
}

// InUse reports whether a socket on pr's port conflicts with n, and
// whether it read the port's summary (an index) rather than its chain. It
// reads the summary once the port has held more than summaryMin sockets
// (always with two-phase, never with one-phase), and scans the port's
// chain before, as Linux's hybrid rule does: a scan of a few sockets costs
// less than the summary's memory (about 20 bytes a socket at IPv4
// addresses, 56 at IPv6 ones, measured at a million sockets of one class)
// on the many ports that hold a few.
func (g *Engine) InUse(pr *Port, n *lookup.Entry) (inUse, indexed bool) {
	if pr.cc != nil {
		return pr.cc.InUse(n), true
	}
	for x := pr.s.list.First(); x != nil; x = x.Next.Load() {
		if bind.Conflicts(n, lookup.OfPrimary(x)) {
			return true, false
		}
	}
	return false, false
}

// count counts e in pr's summary (d = 1) or uncounts it (d = -1), after
// the port's chain took the change; it makes the summary, from the chain,
// when the port first holds more than summaryMin sockets, and keeps it
// while the port holds a socket.
func (g *Engine) count(pr *Port, e *lookup.Entry, d int) {
	switch {
	case pr.cc != nil:
		pr.cc.Add(e, d)
	case pr.s.list.Len() > g.summaryMin:
		pr.cc = new(bind.Summary)
		for x := pr.s.list.First(); x != nil; x = x.Next.Load() {
			pr.cc.Add(lookup.OfPrimary(x), 1)
		}
	}
}

// Link publishes a new entry e on pr's port. e is a bind's, unconnected:
// a connected entry is only ever published by Replace, which puts its
// peer in the port's filter and marks a shared 4-tuple inside the port's
// sequence count.
func (g *Engine) Link(pr *Port, e *lookup.Entry) {
	if e.Has(lookup.ReusePort) {
		e.Group = g.GroupOf(pr, e)
		e.Group.Add(e)
	}
	deviceKind.add(g, pr, e) // an unconnected e has no peer to count
	g.insert(pr, e)
	pr.s.list.PushFront(&e.N1)
	g.count(pr, e, 1)
}

// GroupOf returns the SO_REUSEPORT group on pr's port that the
// unconnected ReusePort entry e belongs in, making it if there is none;
// the caller adds e.
func (g *Engine) GroupOf(pr *Port, e *lookup.Entry) *lookup.Group {
	k := groupOf(e)
	grp := pr.groups[k]
	if grp == nil {
		grp = new(lookup.Group)
		if pr.groups == nil {
			pr.groups = map[groupKey]*lookup.Group{}
		}
		pr.groups[k] = grp
	}
	return grp
}

// Replace puts e, a new state of old's socket, in old's place: a connect,
// a disconnect or a change of device. An unconnected ReusePort e must
// already be in its group (see GroupOf).
// e is published in its index before old leaves its own, inside the
// port's sequence count, so that a lookup searching both notices the move.
func (g *Engine) Replace(pr *Port, old, e *lookup.Entry) {
	pr.s.list.Seq.Begin()
	// Its peer, or its device, is in its filter before it is published:
	// a lookup that skips the index must not miss it there.
	peerKind.add(g, pr, e)
	deviceKind.add(g, pr, e)
	g.insert4(pr, e)
	pr.s.list.Replace(&old.N1, &e.N1)
	unshared := g.remove4(pr, old)
	peerKind.drop(g, pr, old)
	deviceKind.drop(g, pr, old)
	g.unshare(pr, unshared)
	pr.s.list.Seq.End()
	if old.Group != nil {
		g.leave(pr, old)
	}
	// The summary counts e as it counted old unless the attributes that
	// decide a conflict changed: most connects keep them (the local
	// address stays), and spare the summary's two updates.
	if pr.cc == nil || !bind.SameClass(old, e) {
		g.count(pr, old, -1)
		g.count(pr, e, 1)
	}
}

// Unlink removes e: a close.
func (g *Engine) Unlink(pr *Port, e *lookup.Entry) {
	unshared := g.remove4(pr, e)
	pr.s.list.Remove(&e.N1)
	g.unshare(pr, unshared)
	if e.Group != nil {
		g.leave(pr, e)
	}
	peerKind.drop(g, pr, e)
	deviceKind.drop(g, pr, e)
	g.count(pr, e, -1)
}

func (g *Engine) leave(pr *Port, e *lookup.Entry) {
	if e.Group.Remove(e) == 0 {
		delete(pr.groups, groupOf(e))
	}
}

// classFlags are the flags a datagram's score depends on.
const classFlags = lookup.Is6 | lookup.V6Only | lookup.HasV4 | lookup.HasV6 | lookup.Connected | lookup.Hash4

// sameClass reports whether every datagram scores a and b alike.
func sameClass(a, b *lookup.Entry) bool {
	return a.Flags&classFlags == b.Flags&classFlags && a.V4 == b.V4 && a.V6 == b.V6 &&
		a.Device == b.Device && a.Remote == b.Remote && a.RemotePort == b.RemotePort
}

func (hd heads) at(i int) *lookup.Entry {
	if i == 0 {
		return hd.First
	}
	return (*hd.Rest)[i-1]
}

func (hd heads) len() int {
	switch {
	case hd.First == nil:
		return 0
	case hd.Rest == nil:
		return 1
	}
	return 1 + len(*hd.Rest)
}

// with returns hd with the head of class i set to e (a new class if i is
// hd.len()), or removed if e is nil; the rest slice is copied, never
// changed in place, since lookups read it.
func (hd heads) with(i int, e *lookup.Entry) heads {
	if hd.Rest == nil && (i == 0 || e == nil) {
		// A key of one class, or none, stays so: no slice to build,
		// which spares most binds and closes an allocation.
		return heads{First: e}
	}
	n := hd.len()
	all := make([]*lookup.Entry, 0, n+1)
	for j := range n {
		all = append(all, hd.at(j))
	}
	switch {
	case i == n:
		all = append(all, e)
	case e == nil:
		all = append(all[:i], all[i+1:]...)
	default:
		all[i] = e
	}
	out := heads{First: all[0]}
	if len(all) > 1 {
		rest := all[1:]
		out.Rest = &rest
	}
	return out
}

// inConns reports whether e belongs in the 4-tuple index: connected, with
// an address. A socket that connected without a source address (routing
// found none) keeps its wildcard, and lookups find it in the address
// index under the wildcard, where its score checks the peer.
func inConns(e *lookup.Entry) bool { return e.Has(lookup.Connected) && !e.IsWild() }

// update runs f on e's key in its index (conns if inConns, else addrs),
// and reports whether the key held more than one entry before and after.
// pr is e's port, locked.
func (g *Engine) update(pr *Port, e *lookup.Entry, f func(heads) heads) (before, after bool) {
	apply := func(old Val[lookup.Entry], _ bool) (Val[lookup.Entry], bool) {
		before = heads(old).many()
		hd := f(heads(old))
		after = hd.many()
		return Val[lookup.Entry](hd), hd.First != nil
	}
	if inConns(e) {
		k := connKeyOf(e)
		g.conns.Update(pr.ord, g.connHash(&k), k, apply)
	} else {
		k := addrKeyOf(e)
		g.addrs.Update(pr.ord, g.addrHash(k), k, apply)
	}
	return before, after
}

// byDevice reports whether e is stored under a key of addrs that names its
// device (see addrKey).
func byDevice(e *lookup.Entry) bool { return e.Device != 0 && !inConns(e) }

// insert links e into its class, keeping the class newest first (by Seq:
// for the 4-tuple table, the order of first connects), and reports
// whether e's key held more than one entry before and after. The caller
// holds the port lock, pr, which guards every class chain of the port.
func (g *Engine) insert(pr *Port, e *lookup.Entry) (before, after bool) {
	return g.update(pr, e, func(hd heads) heads {
		for i := range hd.len() {
			x := hd.at(i)
			if !sameClass(x, e) {
				continue
			}
			if e.Seq >= x.Seq {
				e.N2.Prev = nil
				e.N2.Next.Store(&x.N2)
				x.N2.Prev = &e.N2
				return hd.with(i, e)
			}
			// Behind the head: a reconnect to a first 4-tuple. Find its
			// place and link it there; the heads do not change.
			prev := x
			for {
				nx := prev.N2.Next.Load()
				if nx == nil || lookup.OfSecondary(nx).Seq <= e.Seq {
					e.N2.Prev = &prev.N2
					e.N2.Next.Store(nx)
					if nx != nil {
						nx.Prev = &e.N2
					}
					prev.N2.Next.Store(&e.N2)
					return hd
				}
				prev = lookup.OfSecondary(nx)
			}
		}
		e.N2.Prev = nil
		e.N2.Next.Store(nil)
		return hd.with(hd.len(), e)
	})
}

// remove unlinks e from its class, and reports whether e's key held more
// than one entry before and after; if e was not the head of its class,
// the index is left as it is and not read, and both are true. e keeps its
// next link, so that a lookup standing on it carries on.
func (g *Engine) remove(pr *Port, e *lookup.Entry) (before, after bool) {
	if p := e.N2.Prev; p != nil {
		// Not a head: the index does not change.
		nx := e.N2.Next.Load()
		p.Next.Store(nx)
		if nx != nil {
			nx.Prev = p
		}
		e.N2.Prev = nil
		return true, true
	}
	return g.update(pr, e, func(hd heads) heads {
		for i := range hd.len() {
			if hd.at(i) != e {
				continue
			}
			nx := e.N2.Next.Load()
			if nx == nil {
				return hd.with(i, nil)
			}
			nx.Prev = nil
			return hd.with(i, lookup.OfSecondary(nx))
		}
		return hd
	})
}
