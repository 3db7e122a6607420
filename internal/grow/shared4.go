package grow

import "github.com/udpdemux/udpdemux/lookup"

// A scan of a short port chain may stop at the first entry that matches a
// datagram's 4-tuple as a Hash4 entry, since only another Hash4 entry of
// the same 4-tuple could beat it (Linux's 4-tuple hash returns the newest
// of them). So that scans know when one might, each port counts the keys
// of conns on it that hold more than one entry (of any kind: counting more
// than needed only costs a full scan), and marks its chain while the
// count is not 0. The mark is set, inside the port's sequence count,
// before the entry that makes a key shared is published on the chain,
// and cleared only after the entry that left a key is off the chain; how
// a scan reads it is Engine.scan's.

// many reports whether the key whose heads are hd holds more than one
// entry. The caller holds the port lock.
func (hd heads) many() bool {
	return hd.Rest != nil || (hd.First != nil && hd.First.N2.Next.Load() != nil)
}

// shares reports whether e's key in conns holds more than one entry.
func (g *Engine) shares(e *lookup.Entry) bool {
	k := connKeyOf(e)
	hd, ok := g.conns.Get(g.connHash(&k), k)
	return ok && heads(hd).many()
}

// insert4 is insert for e on pr's port, counting a key of conns that e
// makes shared, and marking the chain before e is published there.
func (g *Engine) insert4(pr *Port, e *lookup.Entry) {
	before, after := g.insert(pr, e)
	if inConns(e) && !before && after {
		pr.shared4++
		pr.s.list.SetMark(true)
	}
}

// remove4 is remove, reporting whether e's key of conns stopped being
// shared; the caller passes that to unshare once e is off the chain.
func (g *Engine) remove4(pr *Port, e *lookup.Entry) (unshared bool) {
	head := e.N2.Prev == nil
	before, after := g.remove(pr, e)
	if !inConns(e) {
		return false
	}
	if !head {
		// remove did not read the index; a rare case (sockets sharing
		// a 4-tuple), so it is read here.
		after = g.shares(e)
	}
	return before && !after
}

// unshare uncounts a key that stopped being shared, clearing the chain's
// mark with the last.
func (g *Engine) unshare(pr *Port, unshared bool) {
	if !unshared {
		return
	}
	if pr.shared4--; pr.shared4 == 0 {
		pr.s.list.SetMark(false)
	}
}
