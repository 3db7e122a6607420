//go:build !linux

package serve

import (
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// receiver reads batches through x/net outside Linux, which reads one
// datagram per system call there anyway.
type receiver struct {
	p4 *ipv4.PacketConn
	p6 *ipv6.PacketConn
}

func newReceiver(conn *net.UDPConn, n int) (*receiver, error) {
	if conn.LocalAddr().(*net.UDPAddr).IP.To4() != nil {
		return &receiver{p4: ipv4.NewPacketConn(conn)}, nil
	}
	return &receiver{p6: ipv6.NewPacketConn(conn)}, nil
}

func (r *receiver) recv(ms []ipv4.Message, src []netip.AddrPort) (int, error) {
	var n int
	var err error
	if r.p6 != nil {
		n, err = r.p6.ReadBatch(ms, 0)
	} else {
		n, err = r.p4.ReadBatch(ms, 0)
	}
	for i := range max(n, 0) {
		src[i] = netip.AddrPort{}
		if ua, ok := ms[i].Addr.(*net.UDPAddr); ok {
			src[i] = ua.AddrPort()
		}
	}
	return n, err
}
