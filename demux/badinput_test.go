package demux_test

import (
	"errors"
	"net/netip"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  demux.Config
	}{
		{"slots not a power of two", demux.Config{Slots: 1000}},
		{"slots too few", demux.Config{Slots: 128}},
		{"slots too many", demux.Config{Slots: 131072}},
		{"slots negative", demux.Config{Slots: -256}},
		{"negative threshold", demux.Config{Threshold: -1}},
		{"unknown strategy", demux.Config{Strategy: 9}},
		{"unknown ephemeral algorithm", demux.Config{Ephemeral: 9}},
		{"range low above high", demux.Config{PortLow: 5000, PortHigh: 4000}},
		{"range low zero", demux.Config{PortLow: 0, PortHigh: 4000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := demux.New[int](tc.cfg)
			assert.ErrorIs(t, err, syscall.EINVAL)
			assert.Nil(t, tab)
		})
	}
}

// bigZones maps zones to interface indexes that do not fit an int32, and
// decimal zones to themselves.
func bigZones(zone string) (int, error) {
	switch zone {
	case "big":
		return 1<<32 + 3, nil
	case "half":
		return 1 << 31, nil
	case "neg":
		return -1, nil
	}
	n, err := strconv.Atoi(zone)
	if err != nil {
		return 0, syscall.EINVAL
	}
	return n, nil
}

// TestBadInput lists the malformed calls the API can receive and the
// error each gets; none panics, and none changes the table.
func TestBadInput(t *testing.T) {
	mk := func(t *testing.T) (*demux.Table[int], *demux.Socket[int], *demux.Socket[int], *demux.Socket[int]) {
		tab, err := demux.New[int](demux.Config{Slots: 256, PortLow: 50000, PortHigh: 50001, ZoneIndex: bigZones})
		require.NoError(t, err)
		wild, err := tab.Bind(demux.Options{Addr: any4, Port: 53}, 1)
		require.NoError(t, err)
		v6, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("::1"), Port: 53}, 2)
		require.NoError(t, err)
		closed, err := tab.Bind(demux.Options{Addr: lo4, Port: 99}, 3)
		require.NoError(t, err)
		require.NoError(t, tab.Close(closed))
		return tab, wild, v6, closed
	}
	other, err := demux.New[int](demux.Config{})
	require.NoError(t, err)
	foreign, err := other.Bind(demux.Options{Addr: lo4, Port: 7}, 0)
	require.NoError(t, err)

	peer := netip.MustParseAddrPort("192.0.2.1:1000")
	cases := []struct {
		name string
		op   func(tab *demux.Table[int], wild, v6, closed *demux.Socket[int]) error
		want error
	}{
		{"bind zero address", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Port: 1}, 0)
			return err
		}, syscall.EINVAL},
		{"bind V6Only on IPv4", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: lo4, Port: 1, V6Only: true}, 0)
			return err
		}, syscall.EINVAL},
		{"bind V6Only on v4-mapped", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("::ffff:127.0.0.1"), Port: 1, V6Only: true}, 0)
			return err
		}, syscall.EINVAL},
		{"bind negative device", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: lo4, Port: 1, Device: -1}, 0)
			return err
		}, syscall.EINVAL},
		{"bind link-local without interface", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1"), Port: 1}, 0)
			return err
		}, syscall.EINVAL},
		{"bind link-local zone and other device", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1%2"), Port: 1, Device: 3}, 0)
			return err
		}, syscall.EINVAL},
		{"bind non-numeric zone", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1%eth0"), Port: 1}, 0)
			return err
		}, syscall.EINVAL},
		{"bind zone on global address", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("2001:db8::1%2"), Port: 1}, 0)
			return err
		}, syscall.EINVAL},
		{"bind in use", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: lo4, Port: 53}, 0)
			return err
		}, syscall.EADDRINUSE},
		{"bind(0) with the range full", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			for range 2 {
				if _, err := tab.Bind(demux.Options{Addr: any4}, 0); err != nil {
					return err
				}
			}
			_, err := tab.Bind(demux.Options{Addr: lo4}, 0)
			return err
		}, syscall.EADDRINUSE},
		{"connect closed socket", func(tab *demux.Table[int], _, _, closed *demux.Socket[int]) error {
			return tab.Connect(closed, peer, lo4)
		}, syscall.EBADF},
		{"connect nil socket", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			return tab.Connect(nil, peer, lo4)
		}, syscall.EBADF},
		{"connect another table's socket", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			return tab.Connect(foreign, peer, lo4)
		}, syscall.EBADF},
		{"connect to port 0", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, netip.MustParseAddrPort("192.0.2.1:0"), lo4)
		}, syscall.EINVAL},
		{"connect to zero address", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, netip.AddrPort{}, lo4)
		}, syscall.EINVAL},
		{"connect to unspecified address", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, netip.MustParseAddrPort("0.0.0.0:9"), lo4)
		}, syscall.EINVAL},
		{"connect wildcard without source", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, peer, netip.Addr{})
		}, syscall.EINVAL},
		{"connect wildcard with the other family's unspecified source", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, peer, netip.IPv6Unspecified())
		}, syscall.EINVAL},
		{"connect IPv4 socket to IPv6 peer", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, netip.MustParseAddrPort("[2001:db8::1]:9"), lo4)
		}, syscall.EAFNOSUPPORT},
		{"connect IPv6-only socket to IPv4 peer", func(tab *demux.Table[int], _, v6, _ *demux.Socket[int]) error {
			return tab.Connect(v6, peer, netip.Addr{})
		}, syscall.ENETUNREACH},
		{"connect with a source that is not the bound address", func(tab *demux.Table[int], _, v6, _ *demux.Socket[int]) error {
			return tab.Connect(v6, netip.MustParseAddrPort("[::1]:9"), netip.MustParseAddr("::2"))
		}, syscall.EINVAL},
		{"bind zone naming interface 2^32+3", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1%big"), Port: 1}, 0)
			return err
		}, syscall.EINVAL},
		{"bind zone naming interface 2^31", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1%half"), Port: 1}, 0)
			return err
		}, syscall.EINVAL},
		{"bind zone naming interface -1", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1%neg"), Port: 1}, 0)
			return err
		}, syscall.EINVAL},
		{"bind device 2^31", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			_, err := tab.Bind(demux.Options{Addr: lo4, Port: 1, Device: 1 << 31}, 0)
			return err
		}, syscall.EINVAL},
		{"connect to a peer whose zone names interface 2^32+3", func(tab *demux.Table[int], _, v6, _ *demux.Socket[int]) error {
			return tab.Connect(v6, netip.MustParseAddrPort("[fe80::9%big]:9"), netip.Addr{})
		}, syscall.EINVAL},
		{"connect wildcard with a multicast source", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, peer, netip.MustParseAddr("224.0.0.1"))
		}, syscall.EINVAL},
		{"connect wildcard with the broadcast source", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, peer, netip.MustParseAddr("255.255.255.255"))
		}, syscall.EINVAL},
		{"connect wildcard with a zone on an IPv4 source", func(tab *demux.Table[int], wild, _, _ *demux.Socket[int]) error {
			return tab.Connect(wild, peer, netip.MustParseAddr("::ffff:127.0.0.1").WithZone("junk"))
		}, syscall.EINVAL},
		{"connect with a garbage zone on the bound source", func(tab *demux.Table[int], _, v6, _ *demux.Socket[int]) error {
			return tab.Connect(v6, netip.MustParseAddrPort("[::1]:9"), netip.MustParseAddr("::1%junk"))
		}, syscall.EINVAL},
		{"connect a zero Socket", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			return tab.Connect(new(demux.Socket[int]), peer, lo4)
		}, syscall.EBADF},
		{"close a zero Socket", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			return tab.Close(new(demux.Socket[int]))
		}, syscall.EBADF},
		{"close twice", func(tab *demux.Table[int], _, _, closed *demux.Socket[int]) error {
			return tab.Close(closed)
		}, syscall.EBADF},
		{"close nil", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			return tab.Close(nil)
		}, syscall.EBADF},
		{"close another table's socket", func(tab *demux.Table[int], _, _, _ *demux.Socket[int]) error {
			return tab.Close(foreign)
		}, syscall.EBADF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tab, wild, v6, closed := mk(t)
			// What a datagram finds before, to compare after.
			probe := func() []int {
				var got []int
				for _, dst := range []string{"127.0.0.1:53", "[::1]:53", "127.0.0.1:99"} {
					if s, v := tab.Lookup(peer, netip.MustParseAddrPort(dst), 1); s != nil {
						got = append(got, v)
					} else {
						got = append(got, -1)
					}
				}
				return got
			}
			before, n := probe(), tab.Len()
			var err error
			require.NotPanics(t, func() { err = tc.op(tab, wild, v6, closed) })
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.want), "got %v, want %v", err, tc.want)
			var op *demux.OpError
			assert.ErrorAs(t, err, &op)
			require.NoError(t, tab.Verify())
			if tc.name != "bind(0) with the range full" {
				assert.Equal(t, n, tab.Len(), "the table changed")
			}
			assert.Equal(t, before, probe(), "lookups changed")
			assert.False(t, wild.Connected())
		})
	}
	// Lookups of undeliverable datagrams find nothing and do not panic.
	tab, _, _, _ := mk(t)
	for _, dst := range []netip.AddrPort{{}, netip.MustParseAddrPort("0.0.0.0:53"), netip.MustParseAddrPort("[::]:53"), netip.MustParseAddrPort("127.0.0.1:0")} {
		s, v := tab.Lookup(peer, dst, 1)
		assert.Nil(t, s, dst)
		assert.Zero(t, v)
		n := 0
		tab.LookupMulticast(peer, dst, 1, func(*demux.Socket[int], int) bool { n++; return true })
		assert.Zero(t, n)
	}
	// The same on the growing tables (the default), whose IPv4 path
	// (grow.Engine.Lookup4) checks the datagram itself, with a wildcard
	// on the port that would take the datagram otherwise.
	grown, err := demux.New[int](demux.Config{})
	require.NoError(t, err)
	_, err = grown.Bind(demux.Options{Addr: any4, Port: 53}, 1)
	require.NoError(t, err)
	for _, dst := range []netip.AddrPort{{}, netip.MustParseAddrPort("0.0.0.0:53"), netip.MustParseAddrPort("[::]:53"), netip.MustParseAddrPort("127.0.0.1:0")} {
		s, _ := grown.Lookup(peer, dst, 1)
		assert.Nil(t, s, dst)
	}
}
