package lookup

import (
	"encoding/binary"
	"math"
	"net/netip"
)

// Tuple4 is an IPv4 datagram's addresses, ports and arrival interface: what
// a lookup needs of it, in 16 bytes. A lookup that settles an IPv4
// datagram from one or two index probes reads a Tuple4, and fills in the
// larger Query only when it needs the general search or a flow hash.
type Tuple4 struct {
	Src, Dst         uint32
	SrcPort, DstPort uint16
	Ifindex          int32 // as Query.Ifindex
}

// Init prepares the lookup of a datagram from src to dst that arrived on
// interface ifindex. It reports false unless both addresses are IPv4 (not
// v4-mapped) and some socket could receive the datagram: its destination
// is not 0.0.0.0 and its port is not 0. Query.Init takes the datagrams it
// refuses.
func (t *Tuple4) Init(src, dst netip.AddrPort, ifindex int) bool {
	sa, da := src.Addr(), dst.Addr()
	if !sa.Is4() || !da.Is4() {
		return false
	}
	// Field by field: a composite literal is built in a temporary and
	// copied with one 16-byte load of its five stores, which they cannot
	// forward to.
	t.Src, t.Dst = V4(sa), V4(da)
	t.SrcPort, t.DstPort = src.Port(), dst.Port()
	t.Ifindex = Device(ifindex)
	return t.Dst != 0 && t.DstPort != 0
}

// V4 returns the IPv4 address a as a number, its first byte highest; 0
// if a is not an IPv4 address (Is4). It reads a through As4: through
// As16, whose two 8-byte halves the compiler copied with one 16-byte
// load, which the stores cannot forward to, a connected lookup stalled on
// the load.
func V4(a netip.Addr) uint32 {
	if !a.Is4() {
		return 0
	}
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

// Device returns the Ifindex of a datagram that arrived on interface
// ifindex: noDevice if ifindex does not fit an int32.
func Device(ifindex int) int32 {
	if ifindex >= 0 && ifindex <= math.MaxInt32 {
		return int32(ifindex)
	}
	return noDevice
}

// Set4 fills q in for the IPv4 datagram from src:srcPort to dst:dstPort
// that arrived on the interface whose Ifindex is dev, as Init would from
// its addresses. It takes a Tuple4's fields as scalars: a lookup that
// stored them in a Tuple4 just before would read the two ports back as
// one word, which their two stores cannot forward to.
func (q *Query) Set4(src, dst uint32, srcPort, dstPort uint16, dev int32) {
	q.is4 = true
	q.Dst, q.Src = Map4(dst), Map4(src)
	q.DstPort, q.SrcPort = dstPort, srcPort
	q.Ifindex = dev
}

// ExactScore reports whether s, a score, is that of a candidate bound to
// the destination address itself, which no wildcard candidate can beat.
func ExactScore(s int) bool { return s >= exactTier }
