package serve

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"
)

// setSockopts asks for the kernel's drop count with every datagram
// (SO_RXQ_OVFL), makes an IPv6 socket IPv6-only so that it can coexist
// with the IPv4 socket of the same port, and sets the receive buffer.
func setSockopts(fd int, v6 bool, rcvbuf int) error {
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, 1); err != nil {
		return err
	}
	if v6 {
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1); err != nil {
			return err
		}
	}
	if rcvbuf > 0 {
		// Beyond net.core.rmem_max only SO_RCVBUFFORCE (CAP_NET_ADMIN)
		// gets the size; without the capability, SO_RCVBUF's capped one.
		if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, rcvbuf) == nil {
			return nil
		}
		return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
	}
	return nil
}

// rxqOverflow returns the SO_RXQ_OVFL count in the control messages oob,
// if there is one.
func rxqOverflow(oob []byte) (uint32, bool) {
	d := cmsgData(oob, syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL)
	if len(d) < 4 {
		return 0, false
	}
	return binary.NativeEndian.Uint32(d), true
}

// specDst returns ipi_spec_dst of the IP_PKTINFO control message in oob,
// if there is one: the datagram's destination when the kernel routed it
// to a local unicast address, and otherwise (broadcast, multicast) the
// local address that a reply to its source would leave from.
func specDst(oob []byte) (netip.Addr, bool) {
	var pi syscall.Inet4Pktinfo
	d := cmsgData(oob, syscall.IPPROTO_IP, syscall.IP_PKTINFO)
	if len(d) < int(unsafe.Sizeof(pi)) {
		return netip.Addr{}, false
	}
	at := unsafe.Offsetof(pi.Spec_dst)
	return netip.AddrFrom4([4]byte(d[at : at+4])), true
}

// cmsgData returns the data of the first control message of level and
// typ in oob, or nil. It walks the headers itself, allocating nothing.
func cmsgData(oob []byte, level, typ int32) []byte {
	const hdr = int(unsafe.Sizeof(syscall.Cmsghdr{}))
	for len(oob) >= hdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return nil
		}
		if h.Level == level && h.Type == typ {
			return oob[hdr:l]
		}
		oob = oob[min(cmsgAlign(l), len(oob)):]
	}
	return nil
}

func cmsgAlign(n int) int {
	const a = int(unsafe.Sizeof(uintptr(0)))
	return (n + a - 1) &^ (a - 1)
}

// oobSpace is the room for the SO_RXQ_OVFL control message.
var oobSpace = syscall.CmsgSpace(4)

const msgTrunc = syscall.MSG_TRUNC
