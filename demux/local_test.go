package demux_test

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// nsLocal answers IsLocal for the network namespace the cases below were
// checked in on Linux 6.18: lo (interface 1) up with 127.0.0.1/8 and ::1,
// and eth (interface 2) with 10.9.0.1/24 (broadcast 10.9.0.255),
// 2001:db8::1/64 and fe80::1/64. It records what it was asked.
type nsLocal struct{ asked []netip.Addr }

func (n *nsLocal) isLocal(a netip.Addr, dev int) bool {
	n.asked = append(n.asked, a)
	switch {
	case a.Is4():
		return netip.MustParsePrefix("127.0.0.0/8").Contains(a) ||
			a == netip.MustParseAddr("10.9.0.1") || a == netip.MustParseAddr("10.9.0.255")
	case a == netip.MustParseAddr("2001:db8::1"):
		return true
	case a == netip.MustParseAddr("::1"):
		return dev == 0 || dev == 1
	case a == netip.MustParseAddr("fe80::1"):
		return dev == 2
	}
	return false
}

// TestIsLocal: with Config.IsLocal, Bind accepts and refuses the
// addresses Linux 6.18 did in that namespace (bind without IP_FREEBIND);
// without it, every address binds.
func TestIsLocal(t *testing.T) {
	cases := []struct {
		addr   string
		device int
		err    error // nil: binds
	}{
		{"0.0.0.0", 0, nil},
		{"127.0.0.1", 0, nil},
		{"127.1.2.3", 0, nil},
		{"127.255.255.255", 0, nil},
		{"10.9.0.1", 0, nil},
		{"10.9.0.1", 1, nil},
		{"10.9.0.2", 0, syscall.EADDRNOTAVAIL},
		{"10.9.0.255", 0, nil},
		{"10.9.0.0", 0, syscall.EADDRNOTAVAIL},
		{"255.255.255.255", 0, nil},
		{"224.0.0.251", 0, nil},
		{"239.1.1.1", 0, nil},
		{"0.1.2.3", 0, syscall.EADDRNOTAVAIL},
		{"192.0.2.1", 0, syscall.EADDRNOTAVAIL},
		{"::", 0, nil},
		{"::1", 0, nil},
		{"::1", 2, syscall.EADDRNOTAVAIL},
		{"2001:db8::1", 0, nil},
		{"2001:db8::1", 1, nil},
		{"2001:db8::2", 0, syscall.EADDRNOTAVAIL},
		{"ff02::fb", 0, syscall.EINVAL}, // link-local multicast without an interface
		{"ff05::1", 0, nil},
		{"::ffff:127.0.0.1", 0, nil},
		{"::ffff:10.9.0.1", 0, nil},
		{"::ffff:10.9.0.2", 0, syscall.EADDRNOTAVAIL},
		{"::ffff:224.0.0.251", 0, nil},
		{"::ffff:255.255.255.255", 0, nil},
		{"::ffff:10.9.0.255", 0, nil},
		{"::ffff:0.0.0.0", 0, nil},
		{"::ffff:0.1.2.3", 0, syscall.EADDRNOTAVAIL},
		{"::2", 0, syscall.EADDRNOTAVAIL},
		{"64:ff9b::1", 0, syscall.EADDRNOTAVAIL},
		{"fe80::1%2", 0, nil},
		{"fe80::1%1", 0, syscall.EADDRNOTAVAIL},
		{"fe80::1", 2, nil},
		{"fe80::2%2", 0, syscall.EADDRNOTAVAIL},
	}
	for _, st := range demuxtest.Storages() {
		cfg := st.Table
		for _, tc := range cases {
			t.Run(st.Name+"/"+tc.addr, func(t *testing.T) {
				var ns nsLocal
				cfg.IsLocal = ns.isLocal
				tab, err := demux.New[int](cfg)
				require.NoError(t, err)
				o := demux.Options{Addr: netip.MustParseAddr(tc.addr), Port: 7000, Device: tc.device}
				_, err = tab.Bind(o, 1)
				if tc.err == nil {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, tc.err)
					assert.Zero(t, tab.Len())
				}
				// Without IsLocal (IP_FREEBIND) only EINVAL remains.
				cfg.IsLocal = nil
				free, err := demux.New[int](cfg)
				require.NoError(t, err)
				_, err = free.Bind(o, 1)
				if tc.err == syscall.EINVAL {
					require.ErrorIs(t, err, syscall.EINVAL)
				} else {
					require.NoError(t, err)
				}
			})
		}
	}
}

// TestIsLocalOrder: the address is checked before the port (Linux answers
// EADDRNOTAVAIL for a foreign address on a port in use) and IsLocal is not
// asked about wildcard or multicast addresses.
func TestIsLocalOrder(t *testing.T) {
	var ns nsLocal
	tab, err := demux.New[int](demux.Config{IsLocal: ns.isLocal})
	require.NoError(t, err)
	_, err = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 7001}, 1)
	require.NoError(t, err)
	_, err = tab.Bind(demux.Options{Addr: netip.MustParseAddr("192.0.2.1"), Port: 7001}, 2)
	require.ErrorIs(t, err, syscall.EADDRNOTAVAIL)
	_, err = tab.Bind(demux.Options{Addr: netip.MustParseAddr("192.0.2.1")}, 2)
	require.ErrorIs(t, err, syscall.EADDRNOTAVAIL, "bind(0)")
	ns.asked = nil
	for _, a := range []string{"::", "::ffff:0.0.0.0", "224.0.0.1", "ff05::1", "255.255.255.255"} {
		_, err = tab.Bind(demux.Options{Addr: netip.MustParseAddr(a), Port: 7002, ReuseAddr: true}, 3)
		require.NoError(t, err, a)
	}
	assert.Empty(t, ns.asked)
	_, err = tab.Bind(demux.Options{Addr: netip.MustParseAddr("::ffff:127.0.0.1"), Port: 7003}, 3)
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, ns.asked, "v4-mapped addresses come unmapped")
}
