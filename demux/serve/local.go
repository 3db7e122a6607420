package serve

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// hostAddrs answers Config.IsLocal, and outside Linux whether a
// destination is a broadcast address, from the host's interface
// addresses, which it reads again when they may have changed: when its
// copy is older than hostAddrsMaxAge, and on a miss of IsLocal (an
// address just added) when it is older than hostAddrsMinAge, so that a
// stream of binds to foreign addresses cannot make it read the
// interfaces more often than that.
type hostAddrs struct {
	mu  sync.Mutex // one reader of the interfaces at a time
	cur atomic.Pointer[addrSet]
}

const (
	hostAddrsMaxAge = time.Second
	hostAddrsMinAge = 10 * time.Millisecond
)

// addrSet is what Linux's local routing table says of the host's
// addresses, as far as a bind without IP_FREEBIND cares, and the
// directed broadcast addresses of each interface.
type addrSet struct {
	read time.Time
	// v4 are the IPv4 addresses of every interface, and the directed
	// broadcast addresses of those that are up: Linux's local and
	// broadcast routes.
	v4 map[netip.Addr]bool
	// loop4 are the IPv4 prefixes of loopback interfaces that are up,
	// every address of which is local (127.0.0.0/8 on lo).
	loop4 []netip.Prefix
	// v6 maps each IPv6 address to the interfaces that have it;
	// scoped marks the link-local and loopback ones, which are local
	// only on their own interfaces.
	v6     map[netip.Addr][]int
	scoped map[netip.Addr]bool
	// bcast are the directed broadcast addresses of each interface with
	// IFF_BROADCAST, by index.
	bcast map[int][]netip.Addr
}

// isLocal is Config.IsLocal for the host: addr (no zone, IPv4 unmapped)
// on device (0: none).
func (h *hostAddrs) isLocal(addr netip.Addr, device int) bool {
	return h.refresh(hostAddrsMaxAge).has(addr, device) || h.refresh(hostAddrsMinAge).has(addr, device)
}

func (a *addrSet) has(addr netip.Addr, device int) bool {
	if addr.Is4() {
		return a.v4[addr] || slices.ContainsFunc(a.loop4, func(p netip.Prefix) bool { return p.Contains(addr) })
	}
	devs, ok := a.v6[addr]
	if !ok {
		return false
	}
	// As Linux's ipv6_chk_addr: with a device, a link-local or loopback
	// address counts only on its own interface.
	if device == 0 || !a.scoped[addr] {
		return true
	}
	return slices.Contains(devs, device)
}

// refresh reads the interfaces again unless the copy is younger than
// age, and returns the copy.
func (h *hostAddrs) refresh(age time.Duration) *addrSet {
	if a := h.cur.Load(); a != nil && time.Since(a.read) <= age {
		return a
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.cur.Load(); a != nil && time.Since(a.read) <= age {
		return a
	}
	a := readAddrs()
	h.cur.Store(a)
	return a
}

// readAddrs reads the host's addresses. An interface whose addresses
// cannot be read has none: a bind to one of them fails with EADDRNOTAVAIL,
// where Options.FreeBind is the way out.
func readAddrs() *addrSet {
	a := &addrSet{read: time.Now(), v4: map[netip.Addr]bool{}, v6: map[netip.Addr][]int{}, scoped: map[netip.Addr]bool{}, bcast: map[int][]netip.Addr{}}
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		up, loop := ifi.Flags&net.FlagUp != 0, ifi.Flags&net.FlagLoopback != 0
		for _, x := range addrs {
			ipn, ok := x.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			ones, bits := ipn.Mask.Size()
			if ip.Is4() {
				a.v4[ip] = true
				p := netip.PrefixFrom(ip, ones).Masked()
				switch {
				case up && loop:
					a.loop4 = append(a.loop4, p)
				case up && ones < 31:
					a.v4[lastAddr(p)] = true
				}
				if ifi.Flags&net.FlagBroadcast != 0 && bits == 32 && ones < 31 {
					a.bcast[ifi.Index] = append(a.bcast[ifi.Index], lastAddr(p))
				}
				continue
			}
			a.v6[ip] = append(a.v6[ip], ifi.Index)
			if ip.IsLinkLocalUnicast() || ip.IsLoopback() {
				a.scoped[ip] = true
			}
		}
	}
	return a
}

// lastAddr returns the last address of the IPv4 prefix p: its directed
// broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := ^uint32(0) >> p.Bits()
	binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])|host)
	return netip.AddrFrom4(b)
}

var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// isBroadcast reports whether the IPv4 address dst, which arrived on
// ifindex with IP_PKTINFO's ipi_spec_dst specDst (the zero Addr if
// unknown), is a broadcast address. On Linux the kernel's own routing
// says so: ipi_spec_dst differs from the destination exactly when the
// route to it was not a local unicast one.
// That also holds for broadcast addresses of interfaces without
// IFF_BROADCAST (127.255.255.255 on lo) and in the network namespace of
// the kernel sockets, whichever namespace the reader's thread is in.
// Elsewhere it falls back to the interfaces' directed broadcast
// addresses.
func (s *Server[V]) isBroadcast(dst netip.Addr, ifindex int, specDst netip.Addr) bool {
	if f := s.opts.Broadcast; f != nil {
		return f(dst, ifindex)
	}
	if dst == limitedBroadcast {
		return true
	}
	if specDst.IsValid() {
		return specDst != dst
	}
	return slices.Contains(s.local.refresh(hostAddrsMaxAge).bcast[ifindex], dst)
}
