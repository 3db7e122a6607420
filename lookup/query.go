package lookup

import (
	"net/netip"
)

// Query is a datagram's addressing, prepared once per lookup. A v4-mapped
// source or destination stands for the IPv4 datagram it maps.
type Query struct {
	is4     bool
	Dst     Addr16 // destination in 16-byte (secondary key) form; Dst.V4() when is4
	Src     Addr16 // source in 16-byte form, IPv4 mapped
	SrcPort uint16
	DstPort uint16
	Ifindex int32
	// Payload is the datagram's payload, for a group's selector; nil
	// when the caller has none. Init leaves it as it is.
	Payload []byte
	// picked is the Ref of the SO_REUSEPORT member a lookup of q chose,
	// copied out of its group's array (see Receiver).
	picked Ref
}

// noDevice is the Ifindex of a datagram whose interface index does not fit
// an int32: no socket is bound to it, and a truncated index must not alias
// another interface.
const noDevice int32 = -1

// Init prepares the lookup of a datagram from src to dst that arrived on
// interface ifindex. It reports false when the datagram cannot be delivered
// to any socket: dst is invalid or unspecified or has port 0, or src is
// invalid or of the other family. It fills q in
// place: a Query is too large to return cheaply on the lookup path.
func (q *Query) Init(src, dst netip.AddrPort, ifindex int) bool {
	// An IPv4 datagram, the common case, is filled in as a lookup of the
	// growing storage fills it in (Set4): with fewer instructions between
	// one lookup's loads and the next one's, more of their cache misses
	// overlap. Init's other checks hold of any IPv4 address.
	if sa, da := src.Addr(), dst.Addr(); sa.Is4() && da.Is4() {
		q.Set4(V4(sa), V4(da), src.Port(), dst.Port(), Device(ifindex))
		return q.Dst.V4() != 0 && q.DstPort != 0
	}
	q.DstPort = dst.Port()
	q.Dst = Addr16Of(dst.Addr())
	q.Src = Addr16Of(src.Addr())
	q.SrcPort = src.Port()
	q.Ifindex = Device(ifindex)
	q.is4 = q.Dst.IsMapped()
	if q.is4 != q.Src.IsMapped() || !src.Addr().IsValid() {
		// No datagram has a source of the other family, or none.
		return false
	}
	if q.is4 {
		return q.Dst.V4() != 0 && q.DstPort != 0
	}
	return q.Dst != Wild6 && q.DstPort != 0 && dst.Addr().IsValid()
}

// exactTier is added to the score of a candidate bound to the destination
// address itself; it exceeds every score a wildcard candidate can reach.
const exactTier = 16

// hash4Score is the score of a Hash4 candidate that matches the datagram's
// 4-tuple exactly: above every other, as Linux's 4-tuple hash is searched
// first and returns its newest match without scoring.
const hash4Score = 64

// score returns the score of e for q, or -1 if e does not take it. The
// rules are DESIGN.md's ("Lookup"; rows 1-10): the port, then local4's or
// local6's by q's family, then peerAndDevice's, which both families share.
// The helpers inline, so that score, which runs for every entry of a
// scanned chain, is one call. Each family's branch returns on its own,
// and local4 and local6 refuse with constants, which the compiler follows
// through to score's own refusal: a candidate they refuse, most of a long
// chain, leaves at once, as it did when score stated the rules itself.
func score(e *Face, q *Query) int {
	if e.Port != q.DstPort {
		return -1
	}
	if q.is4 {
		if s, ok := local4(e, q.Dst.V4()); ok {
			return peerAndDevice(e, s, q.Src, q.SrcPort, q.Ifindex)
		}
		return -1
	}
	if s, ok := local6(e, q.Dst); ok {
		return peerAndDevice(e, s, q.Src, q.SrcPort, q.Ifindex)
	}
	return -1
}

// Score4 is score for the IPv4 datagram t, which a lookup holds instead
// of a Query.
func Score4(e *Face, t *Tuple4) int {
	if e.Port != t.DstPort {
		return -1
	}
	if s, ok := local4(e, t.Dst); ok {
		return peerAndDevice(e, s, Map4(t.Src), t.SrcPort, t.Ifindex)
	}
	return -1
}

// local4 is the IPv4 rules: whether e's local side takes an IPv4 datagram
// to dst, and if so its score.
func local4(e *Face, dst uint32) (s int, ok bool) {
	if e.Flags&HasV4 == 0 || e.V4 != dst && e.V4 != 0 {
		return 0, false
	}
	s = 1
	if e.V4 == dst {
		s += exactTier
	}
	if e.Flags&Is6 == 0 {
		s++ // an IPv4 socket beats a dual-stack one
	}
	return s, true
}

// local6 is the IPv6 rules, as local4 states the IPv4 ones.
func local6(e *Face, dst Addr16) (s int, ok bool) {
	if e.Flags&HasV6 == 0 || e.V6 != dst && e.V6 != Wild6 {
		return 0, false
	}
	if e.V6 == dst {
		return exactTier + 1, true
	}
	return 1, true
}

// peerAndDevice adds to s, the score of e's local side, what e's peer and
// device make of a datagram from src:srcPort that arrived on the
// interface whose Ifindex is dev, or returns -1 if they refuse it: the
// rules both families share.
func peerAndDevice(e *Face, s int, src Addr16, srcPort uint16, dev int32) int {
	if e.Flags&Connected != 0 {
		if e.Remote != src || e.RemotePort != srcPort {
			return -1
		}
		s += 8
	}
	if e.Device != 0 {
		if e.Device != dev {
			return -1
		}
		s += 4
	}
	if e.Flags&Hash4 != 0 && s >= exactTier {
		return hash4Score
	}
	return s
}

// ExactTo reports whether Score4 ranks e in the exact tier (ExactScore)
// for a datagram to the IPv4 address dst that arrived on the interface
// whose Ifindex is dev, where a 4-tuple key's match has shown e's port
// and peer to be the datagram's: what local4 and peerAndDevice come to
// then, checked in three comparisons, so that a known peer's lookup does
// not pay for the score it does not need. TestScore4MatchesScore holds
// it to Score4.
func ExactTo(e *Face, dst uint32, dev int32) bool {
	return e.Flags&HasV4 != 0 && e.V4 == dst && (e.Device == 0 || e.Device == dev)
}

// Matches reports whether e receives a multicast or broadcast datagram q:
// the same conditions as a unicast candidate, without the ranking.
func Matches(e *Entry, q *Query) bool { return score(&e.Face, q) >= 0 }
