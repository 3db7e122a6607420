package lookup

import (
	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/internal/sock"
)

// Path says which search a lookup or bind check used.
type Path uint8

const (
	// Primary is a scan of the port's primary chain.
	Primary Path = iota
	// Secondary is a search of the secondary slots.
	Secondary
	// Fallback is a hybrid lookup that chose the secondary table but
	// found a secondary slot longer than the primary chain, and scanned
	// the primary chain instead.
	Fallback
)

// Tables is what a lookup reads: both tables, the hybrid threshold and the
// flow hash seed. It is immutable.
type Tables struct {
	H1        *hash1.Table
	H2        *hash2.Table
	Threshold int
	Seed      uint64
}

// Best tracks the winning candidate of a search: the highest score, and
// among equal scores the largest Seq (the most recently bound).
type Best struct {
	E     *sock.Face
	score int // 0 while E is nil: a candidate's score is at least 1
}

// NewBest returns a Best with no candidate.
func NewBest() Best { return Best{} }

// Offer makes e the winner if it matches q and beats the current one.
// As no candidate scores 0, a refusal (-1) never wins, and a tie is only
// ever with a winner.
func (b *Best) Offer(e *sock.Face, q *Query) {
	s := score(e, q)
	if s < b.score {
		return
	}
	if s > b.score || e.Seq > b.E.Seq {
		b.E, b.score = e, s
	}
}

// Exact reports whether e, a candidate for q, is bound to the destination
// address itself: no wildcard candidate can beat it. A search that finds
// no other candidate as good may take it at once.
func Exact(e *sock.Face, q *Query) bool { return score(e, q) >= exactTier }

// Exact reports whether the winner is bound to the destination address
// itself: no wildcard candidate can beat it.
func (b *Best) Exact() bool { return b.score >= exactTier }

// ScanPrimary offers every entry of the primary chain from n.
func (b *Best) ScanPrimary(n *sock.Node, q *Query) {
	for ; n != nil; n = n.Next.Load() {
		b.Offer(&sock.OfPrimary(n).Face, q)
	}
}

// ScanPrimaryTo4 offers the entries of the primary chain from n until one
// matches q's 4-tuple as a Hash4 entry (Linux's 4-tuple hash would find
// it), and reports whether it stopped there. Only another Hash4 entry of
// the same 4-tuple could beat that one: the caller must know that the
// chain holds none, or scan again.
func (b *Best) ScanPrimaryTo4(n *sock.Node, q *Query) (stopped bool) {
	for ; n != nil; n = n.Next.Load() {
		if b.Offer(&sock.OfPrimary(n).Face, q); b.score == hash4Score {
			return true
		}
	}
	return false
}

// scanSecondary offers the entries of the secondary chain from n that may
// match q. A secondary chain also holds entries of other addresses whose
// hash collides; they are passed over on their V6 alone: a candidate's V6
// is the datagram's destination (an IPv4 address in mapped form), or a
// wildcard.
func (b *Best) scanSecondary(n *sock.Node, q *Query) {
	for ; n != nil; n = n.Next.Load() {
		e := sock.OfSecondary(n)
		if v := e.V6; v != q.Dst && v != sock.Wild4 && v != sock.Wild6 {
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
func (b *Best) scanDistinct(n *sock.Node, q *Query, h2 *hash2.Table, i int, sum hash2.Summary) {
	for ; n != nil; n = n.Next.Load() {
		e := sock.OfSecondary(n)
		if e.V6 != q.Dst || e.Port != q.DstPort {
			continue
		}
		b.Offer(&e.Face, q)
		if h2.Unchanged(i, sum) {
			return
		}
	}
}

// OnePhase scans the primary chain of q's port.
func (t *Tables) OnePhase(q *Query) *sock.Ref {
	b := NewBest()
	b.ScanPrimary(t.H1.Slot(q.DstPort).Chain.First(), q)
	return ReusePort(t.Seed, b.E, q)
}

// TwoPhase searches the exact-address secondary slot, then the wildcard
// one; the port's primary chain if moves kept overlapping that search.
func (t *Tables) TwoPhase(q *Query) *sock.Ref {
	if e, ok := t.twoPhase(q, -1); ok {
		return ReusePort(t.Seed, e, q)
	}
	return t.OnePhase(q)
}

// Hybrid applies Linux 2.6.33's rule and reports the path it took.
func (t *Tables) Hybrid(q *Query) (*sock.Ref, Path) {
	p := t.H1.Slot(q.DstPort).Chain.Len()
	if p > t.Threshold {
		if e, ok := t.twoPhase(q, p); ok {
			return ReusePort(t.Seed, e, q), Secondary
		}
		return t.OnePhase(q), Fallback
	}
	return t.OnePhase(q), Primary
}

// twoPhase searches the secondary slots. With limit ≥ 0 it gives up
// (false) on meeting a slot longer than limit, as the hybrid rule wants.
// It also gives up when a move between slots overlapped each of its
// sock.ReadTries searches: the caller then scans the port's primary
// chain, where a move replaces an entry in place, so that one scan is
// exact whatever writers do, and no lookup takes a lock (a lookup made
// from a port hook, which holds the port's slot locks, could not).
func (t *Tables) twoPhase(q *Query, limit int) (*sock.Face, bool) {
	h2 := t.H2
	h, wh := h2.AddrHash(q.Dst), h2.WildHash()
	i := h2.Index(h, q.DstPort)
	w := h2.Index(wh, q.DstPort)
	exact, wild := h2.At(i), h2.At(w)
	for range sock.ReadTries {
		if limit >= 0 && exact.Chain.Len() > limit {
			return nil, false
		}
		seq, ok := exact.Seq.TryRead()
		if !ok {
			continue
		}
		b := NewBest()
		switch sum := h2.Summary(i); {
		case !sum.MayHold(h, wh):
		case i != w && sum.Distinct():
			b.scanDistinct(exact.Chain.First(), q, h2, i, sum)
		default:
			b.scanSecondary(exact.Chain.First(), q)
		}
		if b.Exact() || i == w {
			return b.E, true
		}
		if limit >= 0 && wild.Chain.Len() > limit {
			return nil, false
		}
		b.scanSecondary(wild.Chain.First(), q)
		// A socket that connected meanwhile may have moved from the
		// wildcard slot to the exact one after we searched the exact
		// one; if so, search again.
		if !exact.Seq.Changed(seq) {
			return b.E, true
		}
	}
	return nil, false
}
