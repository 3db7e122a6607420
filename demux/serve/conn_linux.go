package serve

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"
)

// Linux's UDP_SEGMENT (SOL_UDP), which package syscall lacks.
const (
	solUDP     = 17
	udpSegment = 103
)

// sendControl is what a write takes from its caller's control messages.
type sendControl struct {
	src     netip.Addr // the zero Addr: not chosen
	ifindex int
	tos     int // the traffic class, if hasTOS
	gso     uint16
	hasTOS  bool
	hasGSO  bool
}

// parse reads oob's control messages, refusing with EINVAL any it does
// not know or cannot honour for this one datagram.
func (s *sendControl) parse(oob []byte) error {
	for len(oob) > 0 {
		h, d, rest, ok := nextCmsg(oob)
		if !ok {
			return syscall.EINVAL
		}
		oob = rest
		switch {
		case h.Level == syscall.IPPROTO_IP && h.Type == syscall.IP_PKTINFO && len(d) >= syscall.SizeofInet4Pktinfo:
			pi := (*syscall.Inet4Pktinfo)(unsafe.Pointer(&d[0]))
			// Linux sends from ipi_spec_dst and ignores ipi_addr.
			if a := netip.AddrFrom4(pi.Spec_dst); !a.IsUnspecified() {
				s.src = a
			}
			s.ifindex = int(pi.Ifindex)
		case h.Level == syscall.IPPROTO_IPV6 && h.Type == syscall.IPV6_PKTINFO && len(d) >= syscall.SizeofInet6Pktinfo:
			pi := (*syscall.Inet6Pktinfo)(unsafe.Pointer(&d[0]))
			if a := netip.AddrFrom16(pi.Addr); !a.IsUnspecified() {
				s.src = a
			}
			s.ifindex = int(int32(pi.Ifindex))
		case h.Level == syscall.IPPROTO_IP && h.Type == syscall.IP_TOS && len(d) == 1:
			s.tos, s.hasTOS = int(d[0]), true
		case (h.Level == syscall.IPPROTO_IP && h.Type == syscall.IP_TOS ||
			h.Level == syscall.IPPROTO_IPV6 && h.Type == syscall.IPV6_TCLASS) && len(d) == 4:
			s.tos, s.hasTOS = int(int32(binary.NativeEndian.Uint32(d))), true
		case h.Level == solUDP && h.Type == udpSegment && len(d) == 2:
			s.gso, s.hasGSO = binary.NativeEndian.Uint16(d), true
		default:
			return syscall.EINVAL
		}
	}
	if s.tos < -1 || s.tos > 255 {
		return syscall.EINVAL
	}
	return nil
}

// marshal appends to b the control messages for the kernel socket of the
// destination's family (v4: IPv4), and returns b; nil if there are
// none. The source address, if any, must be of that family (an IPv4
// address may come v4-mapped).
func (s *sendControl) marshal(b []byte, v4 bool) ([]byte, bool) {
	src := s.src
	if v4 && src.Is4In6() {
		src = src.Unmap()
	}
	if src.IsValid() && src.Is4() != v4 {
		return nil, false
	}
	if src.IsValid() || s.ifindex != 0 {
		if v4 {
			pi := syscall.Inet4Pktinfo{Ifindex: int32(s.ifindex)}
			if src.IsValid() {
				pi.Spec_dst = src.As4()
			}
			b = appendCmsg(b, syscall.IPPROTO_IP, syscall.IP_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), syscall.SizeofInet4Pktinfo))
		} else {
			pi := syscall.Inet6Pktinfo{Ifindex: uint32(s.ifindex)}
			if src.IsValid() {
				pi.Addr = src.As16()
			}
			b = appendCmsg(b, syscall.IPPROTO_IPV6, syscall.IPV6_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), syscall.SizeofInet6Pktinfo))
		}
	}
	if s.hasTOS {
		var d [4]byte
		binary.NativeEndian.PutUint32(d[:], uint32(int32(s.tos)))
		if v4 {
			b = appendCmsg(b, syscall.IPPROTO_IP, syscall.IP_TOS, d[:])
		} else {
			b = appendCmsg(b, syscall.IPPROTO_IPV6, syscall.IPV6_TCLASS, d[:])
		}
	}
	if s.hasGSO {
		var d [2]byte
		binary.NativeEndian.PutUint16(d[:], s.gso)
		b = appendCmsg(b, solUDP, udpSegment, d[:])
	}
	return b, true
}

// appendCmsg appends one control message, padded as the kernel pads it.
func appendCmsg(b []byte, level, typ int32, data []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, syscall.CmsgSpace(len(data)))...)
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[start]))
	h.Level, h.Type = level, typ
	h.SetLen(syscall.CmsgLen(len(data)))
	copy(b[start+syscall.CmsgLen(0):], data)
	return b
}

// appendControl writes p's control messages (see Conn) into b, which it
// does not grow: it returns how many bytes it wrote, and whether some
// did not fit (the kernel's MSG_CTRUNC).
func (c *Conn) appendControl(b []byte, p *packet) (int, bool) {
	fits := true
	add := func(level, typ int32, data []byte) {
		if fits = fits && len(b)+syscall.CmsgSpace(len(data)) <= cap(b); fits {
			b = appendCmsg(b, level, typ, data)
		}
	}
	if p.dst.Is4() {
		pi := syscall.Inet4Pktinfo{Ifindex: int32(p.ifindex), Addr: p.dst.As4(), Spec_dst: p.dst.As4()}
		if p.specDst.Is4() {
			pi.Spec_dst = p.specDst.As4()
		}
		add(syscall.IPPROTO_IP, syscall.IP_TOS, []byte{p.tos})
		add(syscall.IPPROTO_IP, syscall.IP_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), syscall.SizeofInet4Pktinfo))
	} else {
		var tclass [4]byte
		binary.NativeEndian.PutUint32(tclass[:], uint32(p.tos))
		add(syscall.IPPROTO_IPV6, syscall.IPV6_TCLASS, tclass[:])
	}
	if c.v6 {
		pi := syscall.Inet6Pktinfo{Addr: p.dst.As16(), Ifindex: uint32(p.ifindex)}
		add(syscall.IPPROTO_IPV6, syscall.IPV6_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), syscall.SizeofInet6Pktinfo))
	}
	return len(b), !fits
}
