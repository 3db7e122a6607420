package demux_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
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

// TestOptionsKept: Options gives back what Bind was given, with the port
// it got, after the bind, a connect and a close, in both storages: the
// handle keeps only the address (its form and zone too) and flags, and
// reads the rest (port, owner, device) from the socket's current entry.
func TestOptionsKept(t *testing.T) {
	ip := netip.MustParseAddr
	peer4, peer6 := netip.MustParseAddrPort("10.0.0.9:7"), netip.MustParseAddrPort("[2001:db8::9]:7")
	cases := []struct {
		name   string
		o      demux.Options
		peer   netip.AddrPort // the zero AddrPort: no connect
		local  netip.Addr     // the source routing chose, for a wildcard
		device int            // the device Options reports
	}{
		{"wildcard, chosen port", demux.Options{Addr: netip.IPv4Unspecified()}, peer4, ip("10.0.0.1"), 0},
		{"reuseport with an owner", demux.Options{Addr: ip("10.0.0.1"), Port: 53, ReusePort: true, Owner: 1000}, peer4, ip("10.0.0.1"), 0},
		{"reuseaddr on a device", demux.Options{Addr: ip("10.0.0.1"), Port: 54, ReuseAddr: true, Device: 3}, peer4, ip("10.0.0.1"), 3},
		{"IPv6-only with an owner", demux.Options{Addr: netip.IPv6Unspecified(), Port: 55, V6Only: true, Owner: 7}, peer6, ip("2001:db8::1"), 0},
		{"v4-mapped", demux.Options{Addr: ip("::ffff:10.0.0.2"), Port: 56}, peer4, netip.Addr{}, 0},
		{"v4-mapped wildcard", demux.Options{Addr: ip("::ffff:0.0.0.0"), Port: 57}, peer4, ip("10.0.0.1"), 0},
		{"IPv6", demux.Options{Addr: ip("2001:db8::1"), Port: 58, V6Only: true}, peer6, netip.Addr{}, 0},
		{"link-local with a zone", demux.Options{Addr: ip("fe80::1%4"), Port: 59, V6Only: true}, netip.MustParseAddrPort("[fe80::9%4]:7"), netip.Addr{}, 4},
	}
	for _, st := range demuxtest.Storages() {
		cfg := st.Table
		for _, c := range cases {
			t.Run(st.Name+"/"+c.name, func(t *testing.T) {
				tab, err := demux.New[int](cfg)
				require.NoError(t, err)
				s, err := tab.Bind(c.o, 1)
				require.NoError(t, err)
				want := c.o
				want.Port = s.LocalAddr().Port()
				want.Device = c.device
				require.NotZero(t, want.Port)
				assert.Equal(t, want, s.Options(), "after bind")
				assert.Equal(t, c.o.Addr.Zone(), s.Options().Addr.Zone(), "after bind")
				require.NoError(t, s.Connect(c.peer, c.local))
				assert.Equal(t, want, s.Options(), "after connect")
				require.NoError(t, s.Close())
				assert.Equal(t, want, s.Options(), "after close")
			})
		}
	}
}
