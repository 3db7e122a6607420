package lookup_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

func bound(t *testing.T, addr string, dev int32) *lookup.Entry {
	t.Helper()
	l, err := ipv6.Bind(netip.MustParseAddr(addr), false, 0, nil)
	require.NoError(t, err)
	return &lookup.Entry{Face: lookup.Face{Flags: l.Flags, V4: l.V4, V6: l.V6, Device: dev, Port: 53}}
}

func TestScore(t *testing.T) {
	q4 := lookup.MustQuery(t, "192.0.2.1:1000", "127.0.0.1:53", 1)
	q6 := lookup.MustQuery(t, "[2001:db8::1]:1000", "[::1]:53", 1)
	q4p := lookup.MustQuery(t, "192.0.2.1:1000", "127.0.0.6:53", 1)
	for _, tc := range []struct {
		addr string
		dev  int32
		q    *lookup.Query
		want int
	}{
		{"127.0.0.1", 0, q4, lookup.ExactTier + 2},
		{"0.0.0.0", 0, q4, 2},
		{"::", 0, q4, 1},
		{"::ffff:127.0.0.1", 0, q4, lookup.ExactTier + 1},
		{"127.0.0.2", 0, q4, -1},
		// No IPv4 side: not even the address an IPv6 socket holds
		// for IPv4 (127.0.0.6) takes an IPv4 datagram.
		{"::1", 0, q4p, -1},
		{"127.0.0.1", 1, q4, lookup.ExactTier + 2 + 4},
		{"127.0.0.1", 2, q4, -1},
		{"::1", 0, q6, lookup.ExactTier + 1},
		{"::", 0, q6, 1},
		{"0.0.0.0", 0, q6, -1},
	} {
		assert.Equal(t, tc.want, lookup.Score(&bound(t, tc.addr, tc.dev).Face, tc.q), "%s dev %d", tc.addr, tc.dev)
	}
	// lookup.Connected: the peer must be the source, and it scores 8 more.
	e := bound(t, "127.0.0.1", 0)
	e.Flags |= lookup.Connected
	e.Remote, e.RemotePort = lookup.Addr16Of(netip.MustParseAddr("192.0.2.1")), 1000
	assert.Equal(t, lookup.ExactTier+2+8, lookup.Score(&e.Face, q4))
	e.RemotePort = 1001
	assert.Equal(t, -1, lookup.Score(&e.Face, q4))
	// A lookup.Hash4 entry that matches the 4-tuple beats all scores.
	e.RemotePort = 1000
	e.Flags |= lookup.Hash4
	assert.Equal(t, lookup.Hash4Score, lookup.Score(&e.Face, q4))
	// Another port never matches.
	e.Port = 54
	assert.Equal(t, -1, lookup.Score(&e.Face, q4))
}
