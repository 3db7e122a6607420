package ipv6

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/udpdemux/udpdemux/lookup"
)

// Peer is a validated remote address: its 16-byte form (IPv4 mapped) and
// the interface a link-local peer's zone names.
type Peer struct {
	Addr   lookup.Addr16
	Port   uint16
	Device int
}

// Connected returns the state of the socket whose state was old once it
// has connected to p with l, Connect's answer, as its local side: old's
// port, device, owner and value, marked connected, on the device a
// link-local peer's zone names if it names one; an IPv6 socket's v4-mapped
// peer is also its remembered IPv4 peer (Linux's inet_daddr, which the
// placeholder fallback reads). Its order and 4-tuple place are
// lookup.Order's to set.
func (l Local) Connected(old *lookup.Entry, p Peer) *lookup.Entry {
	e := &lookup.Entry{
		Face: lookup.Face{Port: old.Port, Flags: old.Flags | lookup.Connected, Device: old.Device,
			Ref: old.Ref, Remote: p.Addr, RemotePort: p.Port},
		Owner: old.Owner, Peer4: old.Peer4,
	}
	l.SetOn(e)
	if p.Device != 0 {
		e.Device = int32(p.Device)
	}
	if e.Remote.IsMapped() && e.Has(lookup.Is6) {
		e.Peer4 = e.Remote.V4()
	}
	return e
}

// Connect returns the local side and peer of the socket whose local side
// is l (with device dev) after it connects to peer, taking src as its
// local address if l is a wildcard. src is what routing chose; it must be
// given when l is a wildcard and, if given otherwise, must equal l's
// address. The errors follow Linux: EINVAL for a malformed peer or source,
// EAFNOSUPPORT for an IPv6 peer on an IPv4 socket, ENETUNREACH for an IPv4
// peer on an IPv6-only socket.
func Connect(l Local, dev int, peer netip.AddrPort, src netip.Addr, zi ZoneIndex) (Local, Peer, error) {
	p, err := checkPeer(l, dev, peer, zi)
	if err != nil {
		return l, Peer{}, err
	}
	// The source's zone, if any, must name the socket's interface, and a
	// link-local source binds it as a link-local peer does. A socket bound
	// to a specific address has its source already, which needs no
	// interface: Linux connects one bound to fe80::1 whose device a
	// disconnect or SO_BINDTODEVICE removed.
	if src.IsValid() && (l.isWild() || src.Zone() != "") {
		sdev, err := scopeOf(src, max(dev, p.Device), zi)
		if err != nil {
			return l, Peer{}, err
		}
		if sdev != 0 {
			p.Device = sdev
		}
		src = src.WithZone("")
	}
	n, err := connectedLocal(l, p, src)
	if err != nil {
		return l, Peer{}, err
	}
	return n, p, nil
}

// checkPeer validates peer as the remote of the socket whose local side is
// l (with device dev), in Linux's order of checks, and returns it in the
// socket's form.
func checkPeer(l Local, dev int, peer netip.AddrPort, zi ZoneIndex) (Peer, error) {
	pa := peer.Addr()
	if !pa.IsValid() || pa.IsUnspecified() || (pa.Is4In6() && pa.Unmap().IsUnspecified()) {
		return Peer{}, fmt.Errorf("remote address %v: %w", pa, syscall.EINVAL)
	}
	if peer.Port() == 0 {
		return Peer{}, fmt.Errorf("remote port 0: %w", syscall.EINVAL)
	}
	is6 := l.Flags&lookup.Is6 != 0
	v4peer := pa.Is4() || pa.Is4In6()
	switch {
	case !is6 && !pa.Is4():
		return Peer{}, fmt.Errorf("IPv6 peer %v on an IPv4 socket: %w", pa, syscall.EAFNOSUPPORT)
	case is6 && v4peer && l.Flags&lookup.V6Only != 0:
		return Peer{}, fmt.Errorf("IPv4 peer %v on an IPv6-only socket: %w", pa, syscall.ENETUNREACH)
	}
	pdev, err := scopeOf(pa, dev, zi)
	if err != nil {
		return Peer{}, err
	}
	p := Peer{Port: peer.Port(), Device: pdev}
	// Linux checks the link-local peer's interface before this.
	if is6 && !v4peer && l.V6.IsMapped() {
		return Peer{}, fmt.Errorf("IPv6 peer %v on a socket with a v4-mapped local address: %w", pa, syscall.EAFNOSUPPORT)
	}
	p.Addr = lookup.Addr16Of(pa.WithZone(""))
	return p, nil
}

// connectedLocal returns the local side of the socket whose local side is
// l after it connects to the validated peer p, with src (without zone) the
// source address routing chose. An unspecified src (0.0.0.0,
// ::ffff:0.0.0.0, or "::" for an IPv6 peer) on a wildcard l says that
// routing found none: l stays a wildcard for an IPv4 peer, and an IPv6
// peer fails with EADDRNOTAVAIL, as in Linux.
func connectedLocal(l Local, p Peer, src netip.Addr) (Local, error) {
	v4peer := p.Addr.IsMapped()
	pa := p.Addr.Addr(v4peer && l.Flags&lookup.Is6 == 0) // as the socket reports it
	if !l.isWild() {
		if bound := l.V6.Addr(l.Flags&lookup.Is6 == 0); src.IsValid() && src.Unmap() != bound.Unmap() {
			return l, fmt.Errorf("source %v is not the bound address %v: %w", src, bound, syscall.EINVAL)
		}
		n := l
		// A connected socket answers only its peer's family. A dual-stack
		// socket that connected to an IPv6 peer and then to an IPv4 one
		// keeps its IPv6 address and the IPv4 placeholder, so it answers
		// neither family in the ordinary way (see
		// lookup.PlaceholderFallback), until it connects to an IPv6 peer
		// again.
		if v4peer {
			n.Flags &^= lookup.HasV6
		} else {
			n.Flags = n.Flags&^lookup.HasV4 | lookup.HasV6
		}
		return n, nil
	}
	if !src.IsValid() {
		return l, fmt.Errorf("a wildcard socket needs the local source address routing chose: %w", syscall.EINVAL)
	}
	if u := src.Unmap(); u.IsUnspecified() {
		// Routing found no source address, as for a device without an
		// address of the peer's family. Linux then connects an IPv4 peer
		// and keeps the wildcard (a dual-stack socket's shows as
		// ::ffff:0.0.0.0): the IPv4 case below, with 0.0.0.0 as the
		// source, does; an IPv6 connect fails.
		switch {
		case u.Is4() != v4peer:
			return l, fmt.Errorf("source %v for peer %v: %w", src, pa, syscall.EINVAL)
		case !v4peer:
			return l, fmt.Errorf("no IPv6 source address for %v: %w", pa, syscall.EADDRNOTAVAIL)
		}
	}
	// Routing never chooses a multicast or broadcast source.
	if u := src.Unmap(); u.IsMulticast() || u == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return l, fmt.Errorf("source %v is not a unicast address: %w", src, syscall.EINVAL)
	}
	n := l
	switch {
	case v4peer:
		if !src.Unmap().Is4() {
			return l, fmt.Errorf("IPv6 source %v for IPv4 peer %v: %w", src, pa, syscall.EINVAL)
		}
		n.V4 = lookup.V4(src.Unmap())
		n.Flags &^= lookup.HasV6
		n.V6 = lookup.Map4(n.V4)
	default:
		if !src.Is6() || src.Is4In6() {
			return l, fmt.Errorf("IPv4 source %v for IPv6 peer %v: %w", src, pa, syscall.EINVAL)
		}
		n.V6 = lookup.Addr16Of(src)
		n.V4 = lookup.Placeholder4
		n.Flags &^= lookup.HasV4
	}
	return n, nil
}
