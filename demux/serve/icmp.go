package serve

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"sync"
	"time"
)

// Linux's limits on the ICMP errors it sends (net.ipv4.icmp_msgs_per_sec,
// icmp_msgs_burst and icmp_ratelimit, and XRLIM_BURST_FACTOR; IPv6 uses
// the same defaults), which the port-unreachable option follows.
const (
	icmpPerSec     = 1000        // host-wide messages a second
	icmpBurst      = 50          // host-wide burst
	icmpPeerPeriod = time.Second // one message a period to each peer...
	icmpPeerBurst  = 6           // ...after a burst of this many
	// icmpPeersMax bounds the peers whose state is kept: past it, the
	// state of peers whose burst has refilled is dropped, which changes
	// nothing for them.
	icmpPeersMax = 4096
)

// icmpLimiter rate-limits ICMP errors as Linux does: a host-wide token
// bucket, and one per destination of the error (an inet_peer's rate
// tokens), which a destination on loopback skips, as Linux skips it for
// a route through a loopback device. Its methods are safe for concurrent
// use.
type icmpLimiter struct {
	mu     sync.Mutex
	tokens float64   // host-wide, up to icmpBurst
	last   time.Time // of the host-wide refill
	peers  map[netip.Addr]icmpPeer
}

// icmpPeer is a peer's tokens as of its last error. They are time: they
// grow with the time since then, up to a burst's worth, and each error
// spends a period.
type icmpPeer struct {
	tokens time.Duration
	seen   time.Time
}

func newICMPLimiter(now time.Time) *icmpLimiter {
	return &icmpLimiter{tokens: icmpBurst, last: now, peers: map[netip.Addr]icmpPeer{}}
}

// allow reports whether an error to peer may be sent at now, and takes
// its tokens if so.
func (l *icmpLimiter) allow(peer netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := now.Sub(l.last); d > 0 {
		l.tokens = min(icmpBurst, l.tokens+d.Seconds()*icmpPerSec)
		l.last = now
	}
	if l.tokens < 1 {
		return false
	}
	if !peer.Unmap().IsLoopback() {
		full := time.Duration(icmpPeerBurst) * icmpPeerPeriod
		p, ok := l.peers[peer]
		if !ok {
			// A peer not seen yet has a full burst. Past icmpPeersMax,
			// the peers whose tokens are full again are dropped.
			p = icmpPeer{tokens: full, seen: now}
			if len(l.peers) >= icmpPeersMax {
				maps.DeleteFunc(l.peers, func(_ netip.Addr, q icmpPeer) bool {
					return q.tokens+now.Sub(q.seen) >= full
				})
			}
		}
		p.tokens, p.seen = min(full, p.tokens+now.Sub(p.seen)), now
		if p.tokens < icmpPeerPeriod {
			l.peers[peer] = p
			return false
		}
		p.tokens -= icmpPeerPeriod
		l.peers[peer] = p
	}
	l.tokens--
	return true
}

// The ICMP messages, and how much of the datagram they quote: as much as
// keeps the error within the minimum MTU (576 bytes for IPv4, RFC 1812;
// 1280 for IPv6, RFC 4443), as Linux does.
const (
	icmp4Unreach, icmp4PortUnreach = 3, 3
	icmp6Unreach, icmp6PortUnreach = 1, 4
	quote4Max                      = 576 - 20 - 8
	quote6Max                      = 1280 - 40 - 8
)

// portUnreachable appends to buf the ICMP (or ICMPv6) port unreachable
// message that answers the UDP datagram of payload from src to dst: the
// ICMP header, then the datagram's IP and UDP headers rebuilt from its
// addresses (the kernel socket gave only those), then as much of the
// payload as fits. The IPv4 message carries its checksum; the kernel
// computes an ICMPv6 message's, over a pseudo-header with the addresses
// it sends from and to.
func portUnreachable(buf []byte, src, dst netip.AddrPort, payload []byte) []byte {
	v6 := dst.Addr().Is6() && !dst.Addr().Is4In6()
	start := len(buf)
	typ, code, max := byte(icmp4Unreach), byte(icmp4PortUnreach), quote4Max
	if v6 {
		typ, code, max = icmp6Unreach, icmp6PortUnreach, quote6Max
	}
	buf = append(buf, typ, code, 0, 0, 0, 0, 0, 0)
	udpLen := 8 + len(payload)
	ip := len(buf)
	if v6 {
		buf = append(buf, 6<<4, 0, 0, 0)
		buf = binary.BigEndian.AppendUint16(buf, uint16(min(udpLen, 0xffff)))
		buf = append(buf, 17, 64) // next header UDP, hop limit
		s, d := src.Addr().As16(), dst.Addr().As16()
		buf = append(buf, s[:]...)
		buf = append(buf, d[:]...)
	} else {
		buf = append(buf, 0x45, 0)
		buf = binary.BigEndian.AppendUint16(buf, uint16(min(20+udpLen, 0xffff)))
		buf = append(buf, 0, 0, 0, 0, 64, 17, 0, 0) // id, fragment, TTL, UDP, checksum
		s, d := src.Addr().Unmap().As4(), dst.Addr().Unmap().As4()
		buf = append(buf, s[:]...)
		buf = append(buf, d[:]...)
		binary.BigEndian.PutUint16(buf[ip+10:], checksum(buf[ip:ip+20], 0))
	}
	udp := len(buf)
	buf = binary.BigEndian.AppendUint16(buf, src.Port())
	buf = binary.BigEndian.AppendUint16(buf, dst.Port())
	buf = binary.BigEndian.AppendUint16(buf, uint16(min(udpLen, 0xffff)))
	buf = append(buf, 0, 0)
	buf = append(buf, payload...)
	// The UDP checksum covers the whole datagram, quoted or not: the
	// receiver of the error reads the headers only, but a quote is the
	// datagram as it was.
	sum := udpChecksum(buf[udp:], src.Addr(), dst.Addr(), udpLen)
	binary.BigEndian.PutUint16(buf[udp+6:], sum)
	if len(buf)-ip > max {
		buf = buf[:ip+max]
	}
	if !v6 {
		binary.BigEndian.PutUint16(buf[start+2:], checksum(buf[start:], 0))
	}
	return buf
}

// udpChecksum returns the UDP checksum of the datagram seg (header with a
// zero checksum, then payload) from src to dst, over the pseudo-header
// of its family; 0xffff for a sum of 0, as RFC 768 asks.
func udpChecksum(seg []byte, src, dst netip.Addr, udpLen int) uint16 {
	var pseudo uint32
	for _, a := range [2]netip.Addr{src.Unmap(), dst.Unmap()} {
		b := a.AsSlice() // the family's form: 4 or 16 bytes
		for i := 0; i+1 < len(b); i += 2 {
			pseudo += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	pseudo += 17 + uint32(udpLen)>>16 + uint32(udpLen)&0xffff
	sum := checksum(seg, pseudo)
	if sum == 0 {
		return 0xffff
	}
	return sum
}

// checksum returns the Internet checksum (RFC 1071) of b, starting from
// the partial sum acc.
func checksum(b []byte, acc uint32) uint16 {
	sum := uint64(acc)
	for len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
