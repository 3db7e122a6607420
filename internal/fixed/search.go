package fixed

import (
	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/lookup"
)

// tables is what the fixed storage's lookups read: both tables, the
// hybrid threshold and the flow hash seed. It is immutable.
type tables struct {
	h1        *hash1.Table
	h2        *hash2.Table
	threshold int
	seed      uint64
}

// onePhase scans the primary chain of q's port.
func (t *tables) onePhase(q *lookup.Query) *lookup.Ref {
	b := lookup.Best{}
	b.ScanPrimary(t.h1.Slot(q.DstPort).Chain.First(), q)
	return lookup.Receiver(t.seed, b.E, q)
}

// twoPhase searches the exact-address secondary slot, then the wildcard
// one; the port's primary chain if moves kept overlapping that search.
func (t *tables) twoPhase(q *lookup.Query) *lookup.Ref {
	if e, ok := t.secondary(q, -1); ok {
		return lookup.Receiver(t.seed, e, q)
	}
	return t.onePhase(q)
}

// hybrid applies Linux 2.6.33's rule and reports the path it took.
func (t *tables) hybrid(q *lookup.Query) (*lookup.Ref, lookup.Path) {
	p := t.h1.Slot(q.DstPort).Chain.Len()
	if p > t.threshold {
		if e, ok := t.secondary(q, p); ok {
			return lookup.Receiver(t.seed, e, q), lookup.Secondary
		}
		return t.onePhase(q), lookup.Fallback
	}
	return t.onePhase(q), lookup.Primary
}

// secondary searches the secondary slots. With limit ≥ 0 it gives up
// (false) on meeting a slot longer than limit, as the hybrid rule wants.
// It also gives up when a move between slots overlapped each of its
// lookup.ReadTries searches: the caller then scans the port's primary
// chain, where a move replaces an entry in place, so that one scan is
// exact whatever writers do, and no lookup takes a lock (a lookup made
// from a port hook, which holds the port's slot locks, could not).
func (t *tables) secondary(q *lookup.Query, limit int) (*lookup.Face, bool) {
	h2 := t.h2
	h, wh := h2.AddrHash(q.Dst), h2.WildHash()
	i := h2.Index(h, q.DstPort)
	w := h2.Index(wh, q.DstPort)
	exact, wild := h2.At(i), h2.At(w)
	for range lookup.ReadTries {
		if limit >= 0 && exact.Chain.Len() > limit {
			return nil, false
		}
		seq, ok := exact.Seq.TryRead()
		if !ok {
			continue
		}
		b := lookup.Best{}
		switch sum := h2.Summary(i); {
		case !sum.MayHold(h, wh):
		case i != w && sum.Distinct():
			scanDistinct(&b, exact.Chain.First(), q, h2, i, sum)
		default:
			scanSecondary(&b, exact.Chain.First(), q)
		}
		if b.Exact() || i == w {
			return b.E, true
		}
		if limit >= 0 && wild.Chain.Len() > limit {
			return nil, false
		}
		scanSecondary(&b, wild.Chain.First(), q)
		// A socket that connected meanwhile may have moved from the
		// wildcard slot to the exact one after we searched the exact
		// one; if so, search again.
		if !exact.Seq.Changed(seq) {
			return b.E, true
		}
	}
	return nil, false
}

// scanSecondary offers to b the entries of the secondary chain from n
// that may match q. A secondary chain also holds entries of other
// addresses whose hash collides; they are passed over on their V6 alone:
// a candidate's V6 is the datagram's destination (an IPv4 address in
// mapped form), or a wildcard.
func scanSecondary(b *lookup.Best, n *lookup.Node, q *lookup.Query) {
	for ; n != nil; n = n.Next.Load() {
		e := lookup.OfSecondary(n)
		if v := e.V6; v != q.Dst && v != lookup.Wild4 && v != lookup.Wild6 {
			continue
		}
		b.Offer(&e.Face, q)
	}
}

// scanDistinct is scanSecondary for slot i, an exact-address slot that
// is not q's wildcard slot, whose summary sum was Distinct: no two of its
// entries had one key and port. Only entries keyed by q's destination can
// match there (wildcard entries of q's port live in the wildcard slot),
// so the walk stops at the one on q's port, unless the slot may have held
// twins since (see hash2.Summary).
func scanDistinct(b *lookup.Best, n *lookup.Node, q *lookup.Query, h2 *hash2.Table, i int, sum hash2.Summary) {
	for ; n != nil; n = n.Next.Load() {
		e := lookup.OfSecondary(n)
		if e.V6 != q.Dst || e.Port != q.DstPort {
			continue
		}
		b.Offer(&e.Face, q)
		if h2.Unchanged(i, sum) {
			return
		}
	}
}
