package lookup

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

// Best tracks the winning candidate of a search: the highest score, and
// among equal scores the largest Seq (the most recently bound). Its zero
// value has no candidate.
type Best struct {
	E     *Face
	score int // 0 while E is nil: a candidate's score is at least 1
}

// Offer makes e the winner if it matches q and beats the current one.
// As no candidate scores 0, a refusal (-1) never wins, and a tie is only
// ever with a winner.
func (b *Best) Offer(e *Face, q *Query) {
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
func Exact(e *Face, q *Query) bool { return score(e, q) >= exactTier }

// Exact reports whether the winner is bound to the destination address
// itself: no wildcard candidate can beat it.
func (b *Best) Exact() bool { return b.score >= exactTier }

// ScanPrimary offers every entry of the primary chain from n.
func (b *Best) ScanPrimary(n *Node, q *Query) {
	for ; n != nil; n = n.Next.Load() {
		b.Offer(&OfPrimary(n).Face, q)
	}
}

// ScanPrimaryTo4 offers the entries of the primary chain from n until one
// matches q's 4-tuple as a Hash4 entry (Linux's 4-tuple hash would find
// it), and reports whether it stopped there. Only another Hash4 entry of
// the same 4-tuple could beat that one: the caller must know that the
// chain holds none, or scan again.
func (b *Best) ScanPrimaryTo4(n *Node, q *Query) (stopped bool) {
	for ; n != nil; n = n.Next.Load() {
		if b.Offer(&OfPrimary(n).Face, q); b.score == hash4Score {
			return true
		}
	}
	return false
}
