//go:build !linux

package serve

import (
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// sendControl is what a write takes from its caller's control messages.
// Outside Linux a Conn takes none: the source is the socket's.
type sendControl struct {
	src     netip.Addr
	ifindex int
}

func (s *sendControl) parse(oob []byte) error {
	if len(oob) > 0 {
		return syscall.EINVAL
	}
	return nil
}

func (s *sendControl) marshal(b []byte, v4 bool) ([]byte, bool) {
	src := s.src
	if v4 {
		src = src.Unmap()
	}
	if src.IsValid() && src.Is4() != v4 {
		return nil, false
	}
	ip := src.AsSlice() // nil for the zero Addr
	if ip == nil && s.ifindex == 0 {
		return b, true
	}
	if v4 {
		return append(b, (&ipv4.ControlMessage{Src: ip, IfIndex: s.ifindex}).Marshal()...), true
	}
	return append(b, (&ipv6.ControlMessage{Src: ip, IfIndex: s.ifindex}).Marshal()...), true
}

// appendControl returns no control messages outside Linux.
func (c *Conn) appendControl(b []byte, p *packet) (int, bool) { return 0, false }
