package serve

import (
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// icmpSender sends the port unreachable errors of Options.PortUnreachable
// from raw ICMP and ICMPv6 sockets, which take CAP_NET_RAW. Its methods
// are safe for concurrent use.
type icmpSender struct {
	fd4, fd6 int // -1 if not open
	lim      *icmpLimiter
	bufs     sync.Pool // *[]byte, a message's room
}

// newICMPSender opens the raw sockets: an ICMPv6 one unless v4only. The
// sockets only send: each filters out every ICMP type it would receive,
// so that no copy of the host's ICMP traffic queues on them.
func newICMPSender(v4only bool) (*icmpSender, error) {
	s := &icmpSender{fd4: -1, fd6: -1, lim: newICMPLimiter(time.Now())}
	s.bufs.New = func() any { b := make([]byte, 0, 8+quote6Max); return &b }
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.IPPROTO_ICMP)
	if err != nil {
		return nil, err
	}
	s.fd4 = fd
	// ICMP_FILTER and ICMP6_FILTER, which package syscall lacks: a set
	// bit blocks its ICMP type.
	if err := syscall.SetsockoptInt(fd, unix.SOL_RAW, unix.ICMP_FILTER, -1); err != nil {
		s.close()
		return nil, err
	}
	if v4only {
		return s, nil
	}
	fd, err = syscall.Socket(syscall.AF_INET6, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.IPPROTO_ICMPV6)
	if err == syscall.EAFNOSUPPORT {
		return s, nil // a kernel without IPv6
	}
	if err != nil {
		s.close()
		return nil, err
	}
	s.fd6 = fd
	var block unix.ICMPv6Filter
	for i := range block.Data {
		block.Data[i] = ^uint32(0)
	}
	if err := unix.SetsockoptICMPv6Filter(fd, syscall.IPPROTO_ICMPV6, unix.ICMPV6_FILTER, &block); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// unreachable answers the unmatched UDP datagram of payload from src to
// dst, which arrived on interface ifindex, with a port unreachable from
// dst's address, unless the rate limits hold it back (limited) or Linux
// would not answer it (a source that no error may go to). It reports
// whether it sent one, and the error of the send.
func (s *icmpSender) unreachable(src, dst netip.AddrPort, ifindex int, payload []byte) (sent, limited bool, err error) {
	v6 := dst.Addr().Is6() && !dst.Addr().Is4In6()
	fd := s.fd4
	if v6 {
		fd = s.fd6
	}
	if fd < 0 || !src.Addr().IsValid() || src.Addr().IsUnspecified() || src.Addr().IsMulticast() {
		return false, false, nil
	}
	if !s.lim.allow(src.Addr(), time.Now()) {
		return false, true, nil
	}
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	msg := portUnreachable((*bp)[:0], src, dst, payload)
	*bp = msg[:0]
	// From dst's address; through the arrival interface only when an
	// address is link-local and so needs one.
	to, ctl := src.Addr().Unmap(), sendControl{src: dst.Addr()}
	var sa syscall.Sockaddr
	if v6 {
		sa6 := &syscall.SockaddrInet6{Addr: to.As16()}
		if to.IsLinkLocalUnicast() || ctl.src.IsLinkLocalUnicast() {
			ctl.ifindex, sa6.ZoneId = ifindex, uint32(ifindex)
		}
		sa = sa6
	} else {
		sa = &syscall.SockaddrInet4{Addr: to.As4()}
	}
	oob, _ := ctl.marshal(nil, !v6)
	err = syscall.Sendmsg(fd, msg, oob, sa, 0)
	return err == nil, false, err
}

func (s *icmpSender) close() {
	for _, fd := range []*int{&s.fd4, &s.fd6} {
		if *fd >= 0 {
			_ = syscall.Close(*fd)
			*fd = -1
		}
	}
}
