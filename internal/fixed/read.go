package fixed

import (
	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/lookup"
)

// Strategy is which search the fixed tables' lookups use.
type Strategy uint8

const (
	// Hybrid is Linux 2.6.33's rule (see tables.hybrid).
	Hybrid Strategy = iota
	// OnePhase scans the port's primary chain.
	OnePhase
	// TwoPhase searches the secondary slots.
	TwoPhase
)

// Lookup returns the Ref of the socket that receives the unicast datagram
// q, and the path it took; an IPv4 datagram to 127.0.0.6 that matched
// nothing tries the placeholder fallback. It takes no lock and does not
// allocate. Its signature is grow.Engine's, so that package demux reads
// either storage alike.
func (x *Engine) Lookup(q *lookup.Query) (r *lookup.Ref, p lookup.Path) {
	switch x.strategy {
	case OnePhase:
		r, p = x.onePhase(q), lookup.Primary
	case TwoPhase:
		r, p = x.twoPhase(q), lookup.Secondary
	default:
		r, p = x.hybrid(q)
	}
	if r == nil && lookup.ToPlaceholder(q) {
		r = lookup.PlaceholderFallback(x.h1.Slot(q.DstPort).Chain.First(), q)
	}
	return r, p
}

// Multicast appends every entry that receives the multicast or broadcast
// datagram q to rs, each once, from a consistent view, and reports the
// path it took, as grow.Engine's does.
func (x *Engine) Multicast(q *lookup.Query, rs []*lookup.Entry) ([]*lookup.Entry, lookup.Path) {
	switch x.strategy {
	case OnePhase:
		return x.matchPrimary(q, rs), lookup.Primary
	case TwoPhase:
		if out, ok := x.matchSecondary(q, rs, -1); ok {
			return out, lookup.Secondary
		}
		return x.matchPrimary(q, rs), lookup.Fallback
	}
	return x.matchHybrid(q, rs)
}

// Tables returns the primary and secondary tables, for statistics.
func (x *Engine) Tables() (*hash1.Table, *hash2.Table) { return x.h1, x.h2 }
