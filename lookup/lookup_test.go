package lookup

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/ipv6"
)

func bound(t *testing.T, addr string, dev int32) *sock.Entry {
	t.Helper()
	l, err := ipv6.Bind(netip.MustParseAddr(addr), false, 0, nil)
	require.NoError(t, err)
	return &sock.Entry{Face: sock.Face{Flags: l.Flags, V4: l.V4, V6: l.V6, Device: dev, Port: 53}}
}

func query(t *testing.T, src, dst string, ifindex int) *Query {
	t.Helper()
	var q Query
	require.True(t, q.Init(netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), ifindex))
	return &q
}

func TestScore(t *testing.T) {
	q4 := query(t, "192.0.2.1:1000", "127.0.0.1:53", 1)
	q6 := query(t, "[2001:db8::1]:1000", "[::1]:53", 1)
	for _, tc := range []struct {
		addr string
		dev  int32
		q    *Query
		want int
	}{
		{"127.0.0.1", 0, q4, exactTier + 2},
		{"0.0.0.0", 0, q4, 2},
		{"::", 0, q4, 1},
		{"::ffff:127.0.0.1", 0, q4, exactTier + 1},
		{"127.0.0.2", 0, q4, -1},
		{"127.0.0.1", 1, q4, exactTier + 2 + 4},
		{"127.0.0.1", 2, q4, -1},
		{"::1", 0, q6, exactTier + 1},
		{"::", 0, q6, 1},
		{"0.0.0.0", 0, q6, -1},
	} {
		assert.Equal(t, tc.want, Score(&bound(t, tc.addr, tc.dev).Face, tc.q), "%s dev %d", tc.addr, tc.dev)
	}
	// Connected: the peer must be the source, and it scores 8 more.
	e := bound(t, "127.0.0.1", 0)
	e.Flags |= sock.Connected
	e.Remote, e.RemotePort = sock.Addr16Of(netip.MustParseAddr("192.0.2.1")), 1000
	assert.Equal(t, exactTier+2+8, Score(&e.Face, q4))
	e.RemotePort = 1001
	assert.Equal(t, -1, Score(&e.Face, q4))
	// A Hash4 entry that matches the 4-tuple beats all scores.
	e.RemotePort = 1000
	e.Flags |= sock.Hash4
	assert.Equal(t, hash4Score, Score(&e.Face, q4))
	// Another port never matches.
	e.Port = 54
	assert.Equal(t, -1, Score(&e.Face, q4))
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
	assert.True(t, q.Is4)
	assert.Equal(t, uint32(127<<24|1), q.Dst.V4())
}

// TestFlowHashSpreads: the member choice is stable per flow and uses
// every member across flows.
func TestFlowHashSpreads(t *testing.T) {
	hits := make([]int, 4)
	for p := range 400 {
		q := query(t, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), uint16(1000+p)).String(), "127.0.0.1:53", 0)
		i := Pick(FlowHash(42, q), 4)
		assert.Equal(t, i, Pick(FlowHash(42, q), 4), "not stable")
		hits[i]++
	}
	for i, n := range hits {
		assert.InDelta(t, 100, n, 40, "member %d", i)
	}
}
