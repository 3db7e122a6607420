//go:build !linux

package serve

import (
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// control is what the reader takes from one datagram's control messages.
type control struct {
	dst     netip.Addr // where the datagram was sent (IPv4 in 4-byte form)
	ifindex int        // the interface it arrived on
	specDst netip.Addr // unknown outside Linux: IP_RECVDSTADDR carries the destination only
	drops   uint32     // SO_RXQ_OVFL is Linux's
	ok      bool       // dst and ifindex were found
	hasDrop bool
}

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
