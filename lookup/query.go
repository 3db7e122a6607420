package lookup

import (
	"net/netip"

	"github.com/udpdemux/udpdemux/internal/sock"
)

// Query is a datagram's addressing, prepared once per lookup. A v4-mapped
// source or destination stands for the IPv4 datagram it maps.
type Query struct {
	is4     bool
	Dst     sock.Addr16 // destination in 16-byte (secondary key) form; Dst.V4() when is4
	Src     sock.Addr16 // source in 16-byte form, IPv4 mapped
	SrcPort uint16
	DstPort uint16
	Ifindex int32
	// Payload is the datagram's payload, for a group's selector; nil
	// when the caller has none. Init leaves it as it is.
	Payload []byte
	// picked is the Ref of the SO_REUSEPORT member a lookup of q chose,
	// copied out of its group's array (see ReusePort).
	picked sock.Ref
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
	q.DstPort = dst.Port()
	q.Dst = sock.Addr16Of(dst.Addr())
	q.Src = sock.Addr16Of(src.Addr())
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
	return q.Dst != sock.Wild6 && q.DstPort != 0 && dst.Addr().IsValid()
}

// exactTier is added to the score of a candidate bound to the destination
// address itself; it exceeds every score a wildcard candidate can reach.
const exactTier = 16

// hash4Score is the score of a Hash4 candidate that matches the datagram's
// 4-tuple exactly: above every other, as Linux's 4-tuple hash is searched
// first and returns its newest match without scoring.
const hash4Score = 64

// score returns the score of e for q, or -1 if e does not match. The
// rules are DESIGN.md's ("Lookup"; rows 1-10).
func score(e *sock.Face, q *Query) int {
	if e.Port != q.DstPort {
		return -1
	}
	var s int
	if q.is4 {
		if e.Flags&sock.HasV4 == 0 {
			return -1
		}
		if e.V4 == q.Dst.V4() {
			s = exactTier
		} else if e.V4 != 0 {
			return -1
		}
		if e.Flags&sock.Is6 == 0 {
			s += 2
		} else {
			s++
		}
	} else {
		if e.Flags&sock.HasV6 == 0 {
			return -1
		}
		if e.V6 == q.Dst {
			s = exactTier
		} else if e.V6 != sock.Wild6 {
			return -1
		}
		s++
	}
	if e.Flags&sock.Connected != 0 {
		if e.Remote != q.Src || e.RemotePort != q.SrcPort {
			return -1
		}
		s += 8
	}
	if e.Device != 0 {
		if e.Device != q.Ifindex {
			return -1
		}
		s += 4
	}
	if e.Flags&sock.Hash4 != 0 && s >= exactTier {
		return hash4Score
	}
	return s
}

// Score4 is score for the IPv4 datagram t. It states score's IPv4 rules
// again rather than sharing local4 and scoreRest with score: score runs for
// every entry of a scanned chain, and built on them it made the runner's
// one-phase scans 6-15 % slower (256 and 4 096 sockets on one port, two
// runs each). TestScore4MatchesScore holds the two to the same answers.
func Score4(e *sock.Face, t *Tuple4) int {
	if e.Port != t.DstPort {
		return -1
	}
	s := local4(e, t.Dst)
	if s < 0 {
		return -1
	}
	return scoreRest(e, s, sock.Map4(t.Src), t.SrcPort, t.Ifindex)
}

// Exact4 is ExactScore(Score4(e, t)) for an entry whose port, peer
// address and peer port are t's destination port, source and source port,
// as a 4-tuple key's match has shown: only e's family, local address and
// device remain to check. A connected lookup spares Score4's second pass
// over the key, which a known peer's lookup would otherwise pay for every
// datagram. TestScore4MatchesScore holds it to Score4's answer.
func Exact4(e *sock.Face, t *Tuple4) bool { return ExactTo(e, t.Dst, t.Ifindex) }

// ExactTo is Exact4 for a datagram to the IPv4 address dst that arrived
// on the interface whose Ifindex is dev.
func ExactTo(e *sock.Face, dst uint32, dev int32) bool {
	return e.Flags&sock.HasV4 != 0 && e.V4 == dst && (e.Device == 0 || e.Device == dev)
}

// local4 scores e's local side for an IPv4 datagram to dst: -1 if it does
// not take it, else its tier and family.
func local4(e *sock.Face, dst uint32) int {
	if e.Flags&sock.HasV4 == 0 {
		return -1
	}
	s := 0
	if e.V4 == dst {
		s = exactTier
	} else if e.V4 != 0 {
		return -1
	}
	if e.Flags&sock.Is6 == 0 {
		return s + 2
	}
	return s + 1
}

// scoreRest adds to s, the score of e's local side, what e's peer and
// device make of a datagram from src:srcPort that arrived on ifindex.
func scoreRest(e *sock.Face, s int, src sock.Addr16, srcPort uint16, ifindex int32) int {
	if e.Flags&sock.Connected != 0 {
		if e.Remote != src || e.RemotePort != srcPort {
			return -1
		}
		s += 8
	}
	if e.Device != 0 {
		if e.Device != ifindex {
			return -1
		}
		s += 4
	}
	if e.Flags&sock.Hash4 != 0 && s >= exactTier {
		return hash4Score
	}
	return s
}

// Matches reports whether e receives a multicast or broadcast datagram q:
// the same conditions as a unicast candidate, without the ranking.
func Matches(e *sock.Entry, q *Query) bool { return score(&e.Face, q) >= 0 }
