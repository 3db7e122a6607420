package serve

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// broadcastCache knows the directed broadcast addresses of each
// interface, read from the system at most once a second, for systems
// whose control messages do not tell a broadcast datagram apart.
type broadcastCache struct {
	mu  sync.Mutex
	cur atomic.Pointer[broadcastAddrs]
}

type broadcastAddrs struct {
	read time.Time
	by   map[int][]netip.Addr // by interface index
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
	c := &s.bcast
	a := c.cur.Load()
	if a == nil || time.Since(a.read) > time.Second {
		a = c.refresh()
	}
	for _, b := range a.by[ifindex] {
		if b == dst {
			return true
		}
	}
	return false
}

func (c *broadcastCache) refresh() *broadcastAddrs {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.cur.Load(); a != nil && time.Since(a.read) <= time.Second {
		return a
	}
	a := &broadcastAddrs{read: time.Now(), by: map[int][]netip.Addr{}}
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagBroadcast == 0 {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, x := range addrs {
			ipn, ok := x.(*net.IPNet)
			if !ok {
				continue
			}
			p, ok := netip.AddrFromSlice(ipn.IP.To4())
			ones, bits := ipn.Mask.Size()
			if !ok || bits != 32 || ones >= 31 {
				continue
			}
			v := p.As4()
			host := ^uint32(0) >> ones
			u := (uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])) | host
			a.by[ifi.Index] = append(a.by[ifi.Index], netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}))
		}
	}
	c.cur.Store(a)
	return a
}
