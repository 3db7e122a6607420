// Package gvisor wraps the parts of gVisor's netstack (gvisor.dev/gvisor)
// that the benchmarks compare udpdemux with: the transport demuxer of a
// stack.Stack (RegisterTransportEndpoint, FindTransportEndpoint) for
// lookups, and ports.PortManager (ReservePort, ReleasePort) for bind(0).
//
// The wrappers convert net/netip values into gVisor's types once, outside
// the timed loops: a benchmark precomputes the IDs to look up with ID and
// then calls Find, which is a direct call of Stack.FindTransportEndpoint.
package gvisor

import (
	"errors"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/ports"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// Endpoint is a minimal stack.TransportEndpoint: it only carries an index,
// so that a benchmark can check which endpoint a lookup found. Its packet
// and error handlers do nothing.
type Endpoint struct {
	// Index identifies the endpoint to the benchmark.
	Index int
}

// HandlePacket implements stack.TransportEndpoint; it drops the packet.
func (*Endpoint) HandlePacket(stack.TransportEndpointID, *stack.PacketBuffer) {}

// HandleError implements stack.TransportEndpoint; it ignores the error.
func (*Endpoint) HandleError(stack.TransportError, *stack.PacketBuffer) {}

// Abort implements stack.TransportEndpoint; there is nothing to abort.
func (*Endpoint) Abort() {}

// Wait implements stack.TransportEndpoint; there is nothing to wait for.
func (*Endpoint) Wait() {}

var _ stack.TransportEndpoint = (*Endpoint)(nil)

// Address converts a netip.Addr into gVisor's tcpip.Address. The
// unspecified addresses 0.0.0.0 and :: become the empty address, which is
// how gVisor's UDP endpoint registers a socket bound to any address. An
// invalid Addr also gives the empty address.
func Address(a netip.Addr) tcpip.Address {
	switch {
	case !a.IsValid() || a.IsUnspecified():
		return tcpip.Address{}
	case a.Is4():
		return tcpip.AddrFrom4(a.As4())
	default:
		return tcpip.AddrFrom16(a.As16())
	}
}

// netProto returns the network protocol of an address: IPv6 for IPv6
// addresses (v4-mapped ones included), IPv4 otherwise.
func netProto(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is6() {
		return ipv6.ProtocolNumber
	}
	return ipv4.ProtocolNumber
}

// ID returns the stack.TransportEndpointID of a UDP socket bound to local
// and connected to remote (remote is the zero AddrPort for an unconnected
// socket). For a datagram src → dst, the ID to look up is ID(dst, src).
func ID(local, remote netip.AddrPort) stack.TransportEndpointID {
	return stack.TransportEndpointID{
		LocalPort:     local.Port(),
		LocalAddress:  Address(local.Addr()),
		RemotePort:    remote.Port(),
		RemoteAddress: Address(remote.Addr()),
	}
}

// Demux is a gVisor stack with the IPv4, IPv6 and UDP protocols, used for
// its transport endpoint demuxer.
type Demux struct {
	s *stack.Stack
}

// NewDemux makes a stack with IPv4, IPv6 and UDP and no NICs.
func NewDemux() *Demux {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{udp.NewProtocol},
	})
	return &Demux{s: s}
}

// Stack returns the underlying gVisor stack.
func (d *Demux) Stack() *stack.Stack { return d.s }

// Flags says how a socket shares its port: MostRecent is UDP SO_REUSEADDR,
// LoadBalanced is SO_REUSEPORT.
type Flags = ports.Flags

// Register registers ep as a UDP endpoint bound to local and connected to
// remote (zero if unconnected), on every NIC, as gVisor's UDP endpoint does
// at the end of bind or connect.
func (d *Demux) Register(local, remote netip.AddrPort, flags Flags, ep *Endpoint) error {
	nets := []tcpip.NetworkProtocolNumber{netProto(local.Addr())}
	if err := d.s.RegisterTransportEndpoint(nets, udp.ProtocolNumber, ID(local, remote), ep, flags, 0); err != nil {
		return fmt.Errorf("gvisor: register %v→%v: %v", local, remote, err)
	}
	return nil
}

// Unregister removes an endpoint registered with Register.
func (d *Demux) Unregister(local, remote netip.AddrPort, flags Flags, ep *Endpoint) {
	nets := []tcpip.NetworkProtocolNumber{netProto(local.Addr())}
	d.s.UnregisterTransportEndpoint(nets, udp.ProtocolNumber, ID(local, remote), ep, flags, 0)
}

// Find looks up the UDP endpoint for an IPv4 datagram with the ID
// ID(dst, src) arriving on NIC nic; nil when none matches. It is a direct
// call of Stack.FindTransportEndpoint.
func (d *Demux) Find(id stack.TransportEndpointID, nic tcpip.NICID) stack.TransportEndpoint {
	return d.s.FindTransportEndpoint(ipv4.ProtocolNumber, udp.ProtocolNumber, id, nic)
}

// Find6 is Find for an IPv6 datagram.
func (d *Demux) Find6(id stack.TransportEndpointID, nic tcpip.NICID) stack.TransportEndpoint {
	return d.s.FindTransportEndpoint(ipv6.ProtocolNumber, udp.ProtocolNumber, id, nic)
}

// Close aborts the registered endpoints and stops the stack's workers.
func (d *Demux) Close() {
	d.s.Destroy()
}

// Ports is a gVisor port manager for UDP over IPv4, with the random number
// generator that gVisor's UDP bind uses (the stack's SecureRNG, reading
// crypto/rand).
type Ports struct {
	pm *ports.PortManager
	s  *stack.Stack
}

// NewPorts makes a port manager whose ephemeral range is low..high.
func NewPorts(low, high uint16) (*Ports, error) {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{udp.NewProtocol},
	})
	if err := s.SetPortRange(low, high); err != nil {
		s.Destroy()
		return nil, fmt.Errorf("gvisor: port range %d-%d: %v", low, high, err)
	}
	return &Ports{pm: s.PortManager, s: s}, nil
}

// reservation is a UDP, IPv4, no-device reservation of addr:port with the
// given flags.
func reservation(addr netip.Addr, port uint16, flags Flags) ports.Reservation {
	return ports.Reservation{
		Networks:  []tcpip.NetworkProtocolNumber{ipv4.ProtocolNumber},
		Transport: udp.ProtocolNumber,
		Addr:      Address(addr),
		Port:      port,
		Flags:     flags,
	}
}

// ErrNoPort is Reserve's error when gVisor finds no free port
// (tcpip.ErrNoPortAvailable for port 0, tcpip.ErrPortInUse for a given
// port).
var ErrNoPort = errors.New("gvisor: no port available")

// Reserve reserves addr:port, with port 0 choosing an ephemeral port as
// gVisor's UDP bind does; it returns the port.
func (p *Ports) Reserve(addr netip.Addr, port uint16, flags Flags) (uint16, error) {
	got, err := p.pm.ReservePort(p.s.SecureRNG(), reservation(addr, port, flags), nil)
	switch err.(type) {
	case nil:
		return got, nil
	case *tcpip.ErrNoPortAvailable, *tcpip.ErrPortInUse:
		return 0, ErrNoPort
	}
	return 0, fmt.Errorf("gvisor: reserve %v:%d: %v", addr, port, err)
}

// Release releases a reservation made by Reserve (port is the port that
// Reserve returned).
func (p *Ports) Release(addr netip.Addr, port uint16, flags Flags) {
	p.pm.ReleasePort(reservation(addr, port, flags))
}

// Close stops the stack that holds the port manager.
func (p *Ports) Close() {
	p.s.Destroy()
}
