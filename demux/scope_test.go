package demux_test

import (
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

func TestLinkLocalScope(t *testing.T) {
	ll := netip.MustParseAddr("fe80::1")
	peer := netip.MustParseAddrPort("[fe80::99]:4000")
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			tab, err := demux.New[string](cfg)
			require.NoError(t, err)
			on2, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1%2"), Port: 5000}, "if2")
			require.NoError(t, err)
			assert.Equal(t, 2, on2.Options().Device, "the zone binds the device")
			assert.Equal(t, "fe80::1%2", on2.LocalAddr().Addr().String())
			// The same address on another interface is another socket.
			_, err = tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1%3"), Port: 5000}, "if3")
			require.NoError(t, err)
			// The device stands for the zone.
			_, err = tab.Bind(demux.Options{Addr: ll, Port: 5000, Device: 2}, "again")
			assert.ErrorIs(t, err, syscall.EADDRINUSE)
			for ifindex, want := range map[int]string{2: "if2", 3: "if3", 4: ""} {
				_, v := tab.Lookup(peer, netip.AddrPortFrom(ll, 5000), ifindex)
				assert.Equal(t, want, v, "arriving on %d", ifindex)
			}
			// A wildcard socket hears link-local traffic of every interface,
			// after the interface's own socket.
			_, err = tab.Bind(demux.Options{Addr: netip.IPv6Unspecified(), Port: 5000}, "any")
			assert.ErrorIs(t, err, syscall.EADDRINUSE, "a wildcard without a device overlaps them")
			for _, a := range []string{"fe80::1%2", "fe80::1%3"} {
				s, _ := tab.Lookup(peer, netip.AddrPortFrom(ll, 5000), int(a[len(a)-1]-'0'))
				require.NoError(t, tab.Close(s))
				_, err = tab.Bind(demux.Options{Addr: netip.MustParseAddr(a), Port: 5000, ReuseAddr: true}, "if"+a[len(a)-1:])
				require.NoError(t, err)
			}
			_, err = tab.Bind(demux.Options{Addr: netip.IPv6Unspecified(), Port: 5000, ReuseAddr: true}, "any")
			require.NoError(t, err)
			_, v := tab.Lookup(peer, netip.AddrPortFrom(ll, 5000), 4)
			assert.Equal(t, "any", v)
			_, v = tab.Lookup(peer, netip.AddrPortFrom(ll, 5000), 2)
			assert.Equal(t, "if2", v)
			require.NoError(t, tab.Verify())
		})
	}
}

func TestMulticastDelivery(t *testing.T) {
	x := netip.MustParseAddrPort("192.0.2.1:7000")
	y := netip.MustParseAddrPort("192.0.2.2:7000")
	group := netip.MustParseAddrPort("224.0.0.251:5353")
	bcast := netip.MustParseAddrPort("255.255.255.255:5353")
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			tab, err := demux.New[string](cfg)
			require.NoError(t, err)
			bind := func(addr string, v string, o demux.Options) *demux.Socket[string] {
				o.Addr, o.Port, o.ReuseAddr = netip.MustParseAddr(addr), 5353, true
				s, err := tab.Bind(o, v)
				require.NoError(t, err, v)
				return s
			}
			bind("0.0.0.0", "any4", demux.Options{})
			bind("224.0.0.251", "group", demux.Options{})
			bind("127.0.0.1", "lo", demux.Options{})
			// Routing never gives a wildcard socket a multicast source: a
			// connected socket hears a group only when bound to it.
			d := bind("224.0.0.251", "connected-x", demux.Options{})
			require.NoError(t, tab.Connect(d, x, netip.Addr{}))
			bind("0.0.0.0", "dev2", demux.Options{Device: 2})
			bind("::", "dual", demux.Options{})
			bind("::", "v6only", demux.Options{V6Only: true})
			bind("::ffff:224.0.0.251", "mapped-group", demux.Options{})
			closed := bind("0.0.0.0", "closed", demux.Options{})
			require.NoError(t, tab.Close(closed))
			// Another port must not be heard.
			_, err = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 5354}, "other-port")
			require.NoError(t, err)

			recv := func(src, dst netip.AddrPort, ifindex int) []string {
				var got []string
				tab.LookupMulticast(src, dst, ifindex, func(s *demux.Socket[string], v string) bool {
					assert.Equal(t, v, s.Value())
					got = append(got, v)
					return true
				})
				slices.Sort(got)
				return got
			}
			assert.Equal(t, []string{"any4", "connected-x", "dual", "group", "mapped-group"}, recv(x, group, 1))
			assert.Equal(t, []string{"any4", "connected-x", "dev2", "dual", "group", "mapped-group"}, recv(x, group, 2))
			assert.Equal(t, []string{"any4", "dual", "group", "mapped-group"}, recv(y, group, 1))
			assert.Equal(t, []string{"any4", "dual"}, recv(y, bcast, 1))
			// yield returning false stops the delivery.
			n := 0
			tab.LookupMulticast(x, group, 2, func(*demux.Socket[string], string) bool { n++; return n < 2 })
			assert.Equal(t, 2, n)
			// The common case allocates nothing.
			allocs := testing.AllocsPerRun(100, func() {
				tab.LookupMulticast(x, group, 2, func(*demux.Socket[string], string) bool { return true })
			})
			assert.Zero(t, allocs)
		})
	}
}

func TestIPv6Multicast(t *testing.T) {
	for _, c := range demuxtest.Configs() {
		tab, err := demux.New[string](c.Table)
		require.NoError(t, err)
		for _, b := range []struct {
			addr string
			dev  int
		}{{"::", 0}, {"ff02::fb%1", 0}, {"ff02::fb", 2}, {"0.0.0.0", 0}, {"::1", 0}} {
			_, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr(b.addr), Port: 5353, ReuseAddr: true, Device: b.dev}, b.addr)
			require.NoError(t, err, b.addr)
		}
		var got []string
		tab.LookupMulticast(netip.MustParseAddrPort("[fe80::7]:5353"), netip.MustParseAddrPort("[ff02::fb]:5353"), 1, func(_ *demux.Socket[string], v string) bool {
			got = append(got, v)
			return true
		})
		slices.Sort(got)
		assert.Equal(t, []string{"::", "ff02::fb%1"}, got, c.Name)
	}
}

// TestLookupDoesNotAllocate, whatever the strategy and family, to
// unconnected and connected sockets alike.
func TestLookupDoesNotAllocate(t *testing.T) {
	for _, c := range demuxtest.Configs() {
		t.Run(c.Name, func(t *testing.T) { lookupDoesNotAllocate(t, c.Table) })
	}
}

func lookupDoesNotAllocate(t *testing.T, cfg demux.Config) {
	tab, err := demux.New[*int](cfg)
	require.NoError(t, err)
	v := new(int)
	for i := range 40 {
		_, err := tab.Bind(demux.Options{Addr: addrN(i), Port: 53}, v)
		require.NoError(t, err)
		_, err = tab.Bind(demux.Options{Addr: addr6N(i), Port: 53}, v)
		require.NoError(t, err)
	}
	peer := netip.MustParseAddrPort("192.0.2.9:9")
	for i := range 40 {
		s, err := tab.Bind(demux.Options{Addr: addrN(100), Port: 54, ReuseAddr: true}, v)
		require.NoError(t, err)
		require.NoError(t, s.Connect(netip.AddrPortFrom(peer.Addr(), uint16(9+i)), netip.Addr{}))
	}
	for range 4 {
		_, err := tab.Bind(demux.Options{Addr: addrN(101), Port: 55, ReusePort: true}, v)
		require.NoError(t, err)
	}
	src := netip.MustParseAddrPort("192.0.2.1:1")
	src6 := netip.MustParseAddrPort("[2001:db8:1::1]:1")
	for _, d := range []struct {
		src, dst netip.AddrPort
		found    bool
	}{
		{src, netip.AddrPortFrom(addrN(7), 53), true},
		{src6, netip.AddrPortFrom(addr6N(7), 53), true},
		{src, netip.MustParseAddrPort("10.9.9.9:53"), false},
		{peer, netip.AddrPortFrom(addrN(100), 54), true}, // a connected socket
		{src, netip.AddrPortFrom(addrN(101), 55), true},  // a pick in a SO_REUSEPORT group
	} {
		_, got := tab.Lookup(d.src, d.dst, 1)
		require.Equal(t, d.found, got != nil, "%v to %v", d.src, d.dst)
		assert.Zero(t, testing.AllocsPerRun(100, func() { tab.Lookup(d.src, d.dst, 1) }), d.dst)
	}
}
