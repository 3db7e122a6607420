//go:build !linux

package serve

import (
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// parseControl reads the destination and interface from oob with
// x/net's parsers (outside Linux there is no recvmmsg, and one datagram
// is read per system call anyway).
func parseControl(oob []byte, v6 bool) control {
	var c control
	var dst net.IP
	if v6 {
		var cm ipv6.ControlMessage
		if cm.Parse(oob) != nil {
			return c
		}
		dst, c.ifindex = cm.Dst, cm.IfIndex
	} else {
		var cm ipv4.ControlMessage
		if cm.Parse(oob) != nil {
			return c
		}
		dst, c.ifindex = cm.Dst, cm.IfIndex
	}
	a, ok := netip.AddrFromSlice(dst)
	if !v6 {
		a = a.Unmap()
	}
	c.dst, c.ok = a, ok
	return c
}
