package lookup

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func query(t *testing.T, src, dst string, ifindex int) *Query {
	t.Helper()
	var q Query
	require.True(t, q.Init(netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), ifindex))
	return &q
}

func TestInitRejects(t *testing.T) {
	var q Query
	for _, tc := range [][2]string{
		{"192.0.2.1:1", "0.0.0.0:53"},
		{"192.0.2.1:1", "127.0.0.1:0"},
		{"[::1]:1", "[::]:53"},
		{"192.0.2.1:1", "[::1]:53"}, // families differ
		{"[::1]:1", "127.0.0.1:53"}, // families differ
	} {
		assert.False(t, q.Init(netip.MustParseAddrPort(tc[0]), netip.MustParseAddrPort(tc[1]), 0), tc)
	}
	assert.False(t, q.Init(netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.1:53"), 0), "no source")
	// A v4-mapped destination is an IPv4 datagram.
	require.True(t, q.Init(netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("[::ffff:127.0.0.1]:53"), 0))
	assert.True(t, q.is4)
	assert.Equal(t, uint32(127<<24|1), q.Dst.V4())
}

// TestFlowHashSpreads: the member choice is stable per flow and spreads
// flows evenly over the members, whichever part of the 4-tuple tells them
// apart, in either family and under any seed, even one that makes one of
// FlowHash's products 0, or a copy of one operand, for all of them. 4096
// flows over 8 members put 512 on each, give or take 21 (one standard
// deviation); the test allows 6 of them.
func TestFlowHashSpreads(t *testing.T) {
	const flows, members = 4096, 8
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	v6 := func(hi bool, i int) netip.Addr {
		var b [16]byte
		b[0], b[1] = 0x20, 0x01
		at := 15 // the interface identifier
		if hi {
			at = 7 // the prefix
		}
		b[at-1], b[at] = byte(i>>8), byte(i)
		return netip.AddrFrom16(b)
	}
	server4 := netip.MustParseAddrPort("192.0.2.1:443")
	server6 := netip.MustParseAddrPort("[2001:db8::1]:443")
	for _, tc := range []struct {
		name     string
		src, dst func(i int) netip.AddrPort
	}{
		{"IPv4 source port", func(i int) netip.AddrPort { return netip.AddrPortFrom(v4(1), uint16(1024+i)) }, func(int) netip.AddrPort { return server4 }},
		{"IPv4 source address", func(i int) netip.AddrPort { return netip.AddrPortFrom(v4(i), 5353) }, func(int) netip.AddrPort { return server4 }},
		{"IPv4 destination address", func(int) netip.AddrPort { return netip.AddrPortFrom(v4(1), 5353) }, func(i int) netip.AddrPort { return netip.AddrPortFrom(v4(1<<20+i), 443) }},
		// The words' plain fold is the same for every flow of this case:
		// only the products tell them apart.
		{"IPv4 source and destination moving together", func(i int) netip.AddrPort { return netip.AddrPortFrom(v4(i), 5353) }, func(i int) netip.AddrPort { return netip.AddrPortFrom(v4(1<<20+i), 443) }},
		{"IPv6 source port", func(i int) netip.AddrPort { return netip.AddrPortFrom(v6(false, 1), uint16(1024+i)) }, func(int) netip.AddrPort { return server6 }},
		{"IPv6 interface identifier", func(i int) netip.AddrPort { return netip.AddrPortFrom(v6(false, i), 5353) }, func(int) netip.AddrPort { return server6 }},
		{"IPv6 prefix", func(i int) netip.AddrPort { return netip.AddrPortFrom(v6(true, i), 5353) }, func(int) netip.AddrPort { return server6 }},
	} {
		// Seeds that make an operand of a product 0 or 1 for every flow
		// of the case (or for flow 0, where the case varies that
		// operand): its product is then 0, or the other operand.
		q0 := query(t, tc.src(0).String(), tc.dst(0).String(), 0)
		seeds := []uint64{0, 42, 1 << 63}
		for _, zero := range []uint64{
			q0.Src.Lo,
			q0.Dst.Lo ^ (uint64(q0.SrcPort)<<16 | uint64(q0.DstPort)) ^ flowKey1,
			q0.Src.Hi ^ flowKey2,
			q0.Dst.Hi ^ flowKey3,
		} {
			seeds = append(seeds, zero, zero^1)
		}
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed %#x", tc.name, seed), func(t *testing.T) {
				hits := make([]int, members)
				for i := range flows {
					q := query(t, tc.src(i).String(), tc.dst(i).String(), 0)
					m := Pick(FlowHash(seed, q), members)
					require.Equal(t, m, Pick(FlowHash(seed, q), members), "not stable")
					hits[m]++
				}
				for m, n := range hits {
					assert.InDelta(t, flows/members, n, 6*21, "member %d of %v", m, hits)
				}
			})
		}
	}
}
