package demux_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// TestOptionsAddrPort: a socket's Options().AddrPort() is its LocalAddr
// until a connect changes the local address.
func TestOptionsAddrPort(t *testing.T) {
	tab, err := demux.New[int](demux.Config{})
	require.NoError(t, err)
	for _, a := range []string{"0.0.0.0", "::", "10.0.0.1", "::ffff:10.0.0.2", "fe80::1%4", "2001:db8::1"} {
		s, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr(a)}, 0)
		require.NoError(t, err)
		assert.Equal(t, s.LocalAddr(), s.Options().AddrPort(), a)
		assert.NotZero(t, s.Options().AddrPort().Port(), a)
	}
	s, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 99}, 0)
	require.NoError(t, err)
	require.NoError(t, s.Connect(netip.MustParseAddrPort("10.0.0.9:1"), netip.MustParseAddr("10.0.0.1")))
	assert.Equal(t, netip.MustParseAddrPort("0.0.0.0:99"), s.Options().AddrPort())
	assert.Equal(t, netip.MustParseAddrPort("10.0.0.1:99"), s.LocalAddr())
}
