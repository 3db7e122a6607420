package demux

import "net/netip"

// Options describes a socket to bind.
type Options struct {
	// Addr is the local address: a specific IPv4 or IPv6 address, or
	// 0.0.0.0 or "::" for any. It must be valid. An IPv4 address makes an
	// IPv4 socket; an IPv6 address, v4-mapped ones included, an IPv6
	// socket. A link-local IPv6 address needs a zone (an interface
	// index, see Config.ZoneIndex) or a Device.
	Addr netip.Addr
	// Port is the local port; 0 chooses an ephemeral port.
	Port uint16
	// ReuseAddr is SO_REUSEADDR: two sockets that both set it never
	// conflict.
	ReuseAddr bool
	// ReusePort is SO_REUSEPORT: two sockets that both set it with the
	// same Owner never conflict, and those on the same address, port,
	// device and family form a group that shares the datagrams by flow.
	ReusePort bool
	// Owner stands for the uid that owns the socket, for ReusePort.
	Owner uint32
	// Device is SO_BINDTODEVICE: an interface index, 0 for none.
	Device int
	// V6Only is IPV6_V6ONLY. It is an error on an IPv4 or v4-mapped
	// address; binding an IPv6 socket to a specific, non-mapped address
	// sets it, as Linux does.
	V6Only bool
}

// AddrPort returns Addr and Port as one netip.AddrPort, the type of
// Socket.LocalAddr. For a socket's Options the two agree until a connect:
// a wildcard socket's LocalAddr then shows the source address it took,
// while its Options keep the address it was bound to.
func (o Options) AddrPort() netip.AddrPort { return netip.AddrPortFrom(o.Addr, o.Port) }
