package lookup

import (
	"math"
	"net/netip"

	"github.com/udpdemux/udpdemux/internal/sock"
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
// v4-mapped) and the datagram can be delivered: dst is not 0.0.0.0 and
// its port is not 0. Query.Init takes the datagrams it refuses.
func (t *Tuple4) Init(src, dst netip.AddrPort, ifindex int) bool {
	sa, da := src.Addr(), dst.Addr()
	if !sa.Is4() || !da.Is4() {
		return false
	}
	t.Src, t.Dst = be32(sa.As4()), be32(da.As4())
	t.SrcPort, t.DstPort = src.Port(), dst.Port()
	t.Ifindex = noDevice
	if ifindex >= 0 && ifindex <= math.MaxInt32 {
		t.Ifindex = int32(ifindex)
	}
	return t.Dst != 0 && t.DstPort != 0
}

func be32(b [4]byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Set4 fills q in for the datagram t, as Init would from its addresses.
func (q *Query) Set4(t *Tuple4) {
	q.Is4 = true
	q.Dst, q.Src = sock.Map4(t.Dst), sock.Map4(t.Src)
	q.DstPort, q.SrcPort = t.DstPort, t.SrcPort
	q.Ifindex = t.Ifindex
}

// ExactScore reports whether s, a score, is that of a candidate bound to
// the destination address itself, which no wildcard candidate can beat.
func ExactScore(s int) bool { return s >= exactTier }
