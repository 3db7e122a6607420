package serve

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestICMPLimiter: the limits are Linux's defaults: a host-wide bucket of
// 50 refilled at 1 000 a second, and to each destination a burst of 6 and
// then one a second; a loopback destination skips the latter.
func TestICMPLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	peer := netip.MustParseAddr("192.0.2.1")
	count := func(l *icmpLimiter, p netip.Addr, n int, at time.Time) int {
		ok := 0
		for range n {
			if l.allow(p, at) {
				ok++
			}
		}
		return ok
	}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, l *icmpLimiter)
	}{
		{"a peer's burst", func(t *testing.T, l *icmpLimiter) {
			assert.Equal(t, icmpPeerBurst, count(l, peer, 20, t0))
		}},
		{"then one a second", func(t *testing.T, l *icmpLimiter) {
			count(l, peer, 20, t0)
			assert.Equal(t, 0, count(l, peer, 5, t0.Add(999*time.Millisecond)))
			assert.Equal(t, 1, count(l, peer, 5, t0.Add(time.Second)))
			assert.Equal(t, 3, count(l, peer, 5, t0.Add(4*time.Second)))
		}},
		{"the burst refills", func(t *testing.T, l *icmpLimiter) {
			count(l, peer, 20, t0)
			assert.Equal(t, icmpPeerBurst, count(l, peer, 20, t0.Add(time.Hour)))
		}},
		{"peers apart", func(t *testing.T, l *icmpLimiter) {
			count(l, peer, 20, t0)
			assert.Equal(t, icmpPeerBurst, count(l, netip.MustParseAddr("2001:db8::1"), 20, t0))
		}},
		{"host-wide burst, loopback skips the peer limit", func(t *testing.T, l *icmpLimiter) {
			assert.Equal(t, icmpBurst, count(l, netip.MustParseAddr("127.0.0.1"), 100, t0))
			assert.Equal(t, 0, count(l, netip.MustParseAddr("::1"), 10, t0))
			assert.Equal(t, 10, count(l, netip.MustParseAddr("::1"), 100, t0.Add(10*time.Millisecond)))
		}},
		{"host-wide over many peers", func(t *testing.T, l *icmpLimiter) {
			ok := 0
			for i := range 200 {
				ok += count(l, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 1, t0)
			}
			assert.Equal(t, icmpBurst, ok)
		}},
		{"peer state stays bounded", func(t *testing.T, l *icmpLimiter) {
			for i := range 3 * icmpPeersMax {
				at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
				l.allow(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), at)
			}
			assert.LessOrEqual(t, len(l.peers), icmpPeersMax)
		}},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newICMPLimiter(t0)) })
	}
}

// TestPortUnreachableMessage: the message is the ICMP error of its
// family, carries a correct checksum (IPv4; the kernel sums ICMPv6), and
// quotes the datagram's IP and UDP headers, as a receiver's kernel needs
// them to find the socket, and as much payload as the minimum MTU allows.
func TestPortUnreachableMessage(t *testing.T) {
	for _, c := range []struct {
		name      string
		src, dst  string
		payload   int
		typ, code byte
		iphdr     int
		max       int
	}{
		{"IPv4", "192.0.2.1:40000", "198.51.100.7:53", 100, 3, 3, 20, 576 - 20},
		{"IPv4, long", "192.0.2.1:40000", "198.51.100.7:53", 2000, 3, 3, 20, 576 - 20},
		{"IPv4, odd", "192.0.2.1:40000", "198.51.100.7:53", 7, 3, 3, 20, 576 - 20},
		{"IPv6", "[2001:db8::1]:40000", "[2001:db8::7]:443", 100, 1, 4, 40, 1280 - 40},
		{"IPv6, long", "[2001:db8::1]:40000", "[2001:db8::7]:443", 3000, 1, 4, 40, 1280 - 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, dst := netip.MustParseAddrPort(c.src), netip.MustParseAddrPort(c.dst)
			payload := make([]byte, c.payload)
			for i := range payload {
				payload[i] = byte(i * 7)
			}
			m := portUnreachable(nil, src, dst, payload)
			require.Equal(t, min(8+c.iphdr+8+c.payload, c.max), len(m))
			assert.Equal(t, c.typ, m[0])
			assert.Equal(t, c.code, m[1])
			if c.iphdr == 20 {
				assert.Zero(t, checksum(m, 0), "ICMP checksum")
				assert.Zero(t, checksum(m[8:28], 0), "quoted IP header checksum")
				assert.Equal(t, byte(0x45), m[8])
				assert.Equal(t, uint16(20+8+c.payload), binary.BigEndian.Uint16(m[10:]))
				assert.Equal(t, byte(17), m[17])
				assert.Equal(t, src.Addr().As4(), [4]byte(m[20:24]))
				assert.Equal(t, dst.Addr().As4(), [4]byte(m[24:28]))
			} else {
				assert.Equal(t, byte(6<<4), m[8])
				assert.Equal(t, uint16(8+c.payload), binary.BigEndian.Uint16(m[12:]))
				assert.Equal(t, byte(17), m[14])
				assert.Equal(t, src.Addr().As16(), [16]byte(m[16:32]))
				assert.Equal(t, dst.Addr().As16(), [16]byte(m[32:48]))
			}
			udp := m[8+c.iphdr:]
			assert.Equal(t, src.Port(), binary.BigEndian.Uint16(udp[0:]))
			assert.Equal(t, dst.Port(), binary.BigEndian.Uint16(udp[2:]))
			assert.Equal(t, uint16(8+c.payload), binary.BigEndian.Uint16(udp[4:]))
			assert.Equal(t, payload[:len(udp)-8], udp[8:], "the quoted payload")
			// The UDP checksum verifies over the whole datagram and the
			// pseudo-header of its family, built here by hand.
			var pseudo []byte
			if c.iphdr == 20 {
				s4, d4 := src.Addr().As4(), dst.Addr().As4()
				pseudo = append(append(pseudo, s4[:]...), d4[:]...)
				pseudo = append(pseudo, 0, 17)
				pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(8+c.payload))
			} else {
				s6, d6 := src.Addr().As16(), dst.Addr().As16()
				pseudo = append(append(pseudo, s6[:]...), d6[:]...)
				pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(8+c.payload))
				pseudo = append(pseudo, 0, 0, 0, 17)
			}
			whole := append(append(pseudo, udp[:8]...), payload...)
			assert.Zero(t, checksum(whole, 0), "the quoted UDP checksum")
		})
	}
}

// TestChecksum: RFC 1071's example, and an odd length.
func TestChecksum(t *testing.T) {
	assert.Equal(t, ^uint16(0xddf2), checksum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0))
	assert.Equal(t, ^uint16(0x0100+0x0200), checksum([]byte{0x01, 0x00, 0x02}, 0))
}
