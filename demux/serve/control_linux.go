package serve

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"
)

// parseControl reads the IP_PKTINFO and IP_TOS (IPv6: IPV6_PKTINFO and
// IPV6_TCLASS) and SO_RXQ_OVFL control messages in oob, in one walk over
// their headers. It reads the packet info bytes itself rather than
// through ipv4.ControlMessage.Parse (ipv6's), which allocates three
// objects per datagram (its list of messages, the ControlMessage, which
// escapes, and the Dst slice) and costs the reader more than the table's
// lookups do. BenchmarkReceive reports the allocations.
func parseControl(oob []byte, v6 bool) control {
	var c control
	for h, d, rest, ok := nextCmsg(oob); ok; h, d, rest, ok = nextCmsg(rest) {
		switch {
		case h.Level == syscall.SOL_SOCKET && h.Type == syscall.SO_RXQ_OVFL && len(d) >= 4:
			c.drops, c.hasDrop = binary.NativeEndian.Uint32(d), true
		case !v6 && h.Level == syscall.IPPROTO_IP && h.Type == syscall.IP_TOS && len(d) >= 1:
			c.tos = d[0]
		case v6 && h.Level == syscall.IPPROTO_IPV6 && h.Type == syscall.IPV6_TCLASS && len(d) >= 4:
			c.tos = uint8(binary.NativeEndian.Uint32(d))
		case !v6 && h.Level == syscall.IPPROTO_IP && h.Type == syscall.IP_PKTINFO && len(d) >= syscall.SizeofInet4Pktinfo:
			pi := (*syscall.Inet4Pktinfo)(unsafe.Pointer(&d[0]))
			c.dst, c.specDst = netip.AddrFrom4(pi.Addr), netip.AddrFrom4(pi.Spec_dst)
			c.ifindex, c.ok = int(pi.Ifindex), true
		case v6 && h.Level == syscall.IPPROTO_IPV6 && h.Type == syscall.IPV6_PKTINFO && len(d) >= syscall.SizeofInet6Pktinfo:
			pi := (*syscall.Inet6Pktinfo)(unsafe.Pointer(&d[0]))
			// ipi6_ifindex is a C int; package syscall spells it uint32.
			c.dst, c.ifindex, c.ok = netip.AddrFrom16(pi.Addr), int(int32(pi.Ifindex)), true
		}
	}
	return c
}

// nextCmsg returns the first control message of oob: its header, its
// data and what follows it; ok is false when oob holds no whole message.
func nextCmsg(oob []byte) (h *syscall.Cmsghdr, data, rest []byte, ok bool) {
	const hdr = int(unsafe.Sizeof(syscall.Cmsghdr{}))
	if len(oob) < hdr {
		return nil, nil, nil, false
	}
	h = (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
	l := int(h.Len)
	if l < hdr || l > len(oob) {
		return nil, nil, nil, false
	}
	return h, oob[hdr:l], oob[min(cmsgAlign(l), len(oob)):], true
}

func cmsgAlign(n int) int {
	const a = int(unsafe.Sizeof(uintptr(0)))
	return (n + a - 1) &^ (a - 1)
}
