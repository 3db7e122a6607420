package ipv6

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

func entry(t *testing.T, addr string, v6only bool) *lookup.Entry {
	t.Helper()
	l, err := Bind(netip.MustParseAddr(addr), v6only, 1, nil)
	require.NoError(t, err, addr)
	return &lookup.Entry{Face: lookup.Face{Flags: l.Flags, V4: l.V4, V6: l.V6}}
}

func TestBind(t *testing.T) {
	for _, tc := range []struct {
		addr            string
		v6only          bool
		is6, has4, has6 bool
		v6onlyAfter     bool
		key             string
	}{
		{"127.0.0.1", false, false, true, false, false, "::ffff:127.0.0.1"},
		{"0.0.0.0", false, false, true, false, false, "::ffff:0.0.0.0"},
		{"::", false, true, true, true, false, "::ffff:0.0.0.0"},
		{"::", true, true, false, true, true, "::ffff:0.0.0.0"},
		{"::1", false, true, false, true, true, "::1"},
		{"::ffff:127.0.0.1", false, true, true, false, false, "::ffff:127.0.0.1"},
		{"::ffff:0.0.0.0", false, true, true, false, false, "::ffff:0.0.0.0"},
		{"fe80::1%2", false, true, false, true, true, "fe80::1"},
	} {
		l, err := Bind(netip.MustParseAddr(tc.addr), tc.v6only, 0, nil)
		require.NoError(t, err, tc.addr)
		assert.Equal(t, tc.is6, l.Flags&lookup.Is6 != 0, "%s is6", tc.addr)
		assert.Equal(t, tc.has4, l.Flags&lookup.HasV4 != 0, "%s has4", tc.addr)
		assert.Equal(t, tc.has6, l.Flags&lookup.HasV6 != 0, "%s has6", tc.addr)
		assert.Equal(t, tc.v6onlyAfter, l.Flags&lookup.V6Only != 0, "%s v6only", tc.addr)
		assert.Equal(t, lookup.Addr16Of(netip.MustParseAddr(tc.key)), l.key(), "%s key", tc.addr)
	}
}

func TestBindErrors(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		v6only bool
		dev    int
	}{
		{"", false, 0},
		{"127.0.0.1", true, 0},
		{"::ffff:127.0.0.1", true, 0},
		{"fe80::1", false, 0},
		{"ff02::1", false, 0},
		{"fe80::1%2", false, 3},
		{"fe80::1%lo", false, 0},
		{"fe80::1%0", false, 0},
		{"2001:db8::1%2", false, 0},
	} {
		var a netip.Addr
		if tc.addr != "" {
			a = netip.MustParseAddr(tc.addr)
		}
		_, err := Bind(a, tc.v6only, tc.dev, nil)
		assert.ErrorIs(t, err, syscall.EINVAL, tc.addr)
	}
	// A link-local address with a device, or a zone equal to it, is fine.
	l, err := Bind(netip.MustParseAddr("fe80::1"), false, 4, nil)
	require.NoError(t, err)
	assert.Equal(t, 4, l.Device)
	l, err = Bind(netip.MustParseAddr("fe80::1%4"), false, 4, nil)
	require.NoError(t, err)
	assert.Equal(t, 4, l.Device)
	// A custom zone mapping.
	l, err = Bind(netip.MustParseAddr("fe80::1%eth1"), false, 0, func(z string) (int, error) {
		if z == "eth1" {
			return 7, nil
		}
		return 0, syscall.ENODEV
	})
	require.NoError(t, err)
	assert.Equal(t, 7, l.Device)
}

// TestOverlap checks the address part of the bind rows of DESIGN.md's
// semantics table (rows 12-26).
func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		existing       string
		existingV6Only bool
		new            string
		newV6Only      bool
		overlap        bool
	}{
		{"::", false, "0.0.0.0", false, true},                  // row 12
		{"::", true, "0.0.0.0", false, false},                  // row 13
		{"::", false, "127.0.0.1", false, true},                // row 14
		{"127.0.0.1", false, "::", false, true},                // row 15
		{"127.0.0.1", false, "::ffff:127.0.0.1", false, true},  // row 16
		{"127.0.0.1", false, "::ffff:127.0.0.2", false, false}, // row 16
		{"::1", false, "::", false, true},                      // row 17
		{"::1", false, "0.0.0.0", false, false},                // row 23
		{"::", true, "::", false, true},                        // both any, whatever V6Only
		{"::", true, "::ffff:127.0.0.1", false, false},         // V6Only :: leaves mapped alone
		{"::ffff:127.0.0.1", false, "::", true, false},         // and the other way round
		{"0.0.0.0", false, "::1", false, false},
		{"::1", false, "::1", false, true},
		{"::1", false, "::2", false, false},
		{"0.0.0.0", false, "::ffff:1.2.3.4", false, true},
	} {
		e, n := entry(t, tc.existing, tc.existingV6Only), entry(t, tc.new, tc.newV6Only)
		assert.Equal(t, tc.overlap, Overlap(n, e), "%s (v6only %v) then %s (v6only %v)", tc.existing, tc.existingV6Only, tc.new, tc.newV6Only)
	}
}

// TestConnectLocal checks the local side after connect (rows 24-26).
func TestConnectLocal(t *testing.T) {
	mustBind := func(a string) Local {
		l, err := Bind(netip.MustParseAddr(a), false, 0, nil)
		require.NoError(t, err)
		return l
	}
	// Row 24: "::" connected to ::1 takes ::1 and IPv4 placeholder 127.0.0.6.
	l, p, err := Connect(mustBind("::"), 0, netip.MustParseAddrPort("[::1]:9"), netip.MustParseAddr("::1"), nil)
	require.NoError(t, err)
	assert.Equal(t, lookup.Addr16Of(netip.MustParseAddr("::1")), l.V6)
	assert.Equal(t, lookup.Placeholder4, l.V4)
	assert.Zero(t, l.Flags&lookup.HasV4)
	assert.Equal(t, uint16(9), p.Port)
	e := &lookup.Entry{Face: lookup.Face{Flags: l.Flags, V4: l.V4, V6: l.V6}}
	assert.True(t, Overlap(entry(t, "0.0.0.0", false), e))
	assert.False(t, Overlap(entry(t, "127.0.0.1", false), e))
	assert.True(t, Overlap(entry(t, "::", false), e))
	// Row 25: "::" connected to a v4-mapped peer takes a v4-mapped local.
	l, _, err = Connect(mustBind("::"), 0, netip.MustParseAddrPort("[::ffff:127.0.0.99]:9"), netip.MustParseAddr("127.0.0.1"), nil)
	require.NoError(t, err)
	assert.Equal(t, lookup.Addr16Of(netip.MustParseAddr("::ffff:127.0.0.1")), l.V6)
	e = &lookup.Entry{Face: lookup.Face{Flags: l.Flags, V4: l.V4, V6: l.V6}}
	assert.True(t, Overlap(entry(t, "127.0.0.1", false), e))
	assert.False(t, Overlap(entry(t, "127.0.0.2", false), e))
	assert.False(t, Overlap(entry(t, "::1", false), e))
	// A link-local peer needs an interface, and gives it to the socket.
	_, _, err = Connect(mustBind("::"), 0, netip.MustParseAddrPort("[fe80::9]:9"), netip.MustParseAddr("fe80::1"), nil)
	assert.ErrorIs(t, err, syscall.EINVAL)
	_, p, err = Connect(mustBind("::"), 0, netip.MustParseAddrPort("[fe80::9%3]:9"), netip.MustParseAddr("fe80::1"), nil)
	require.NoError(t, err)
	assert.Equal(t, 3, p.Device)
}

// TestConnected: the state a connect makes keeps the old state's port,
// owner and value, is connected to the peer, takes the device a
// link-local peer's zone names, and remembers a v4-mapped peer of an
// IPv6 socket as its IPv4 peer (Linux's inet_daddr), which an IPv4 socket
// does not keep and a later IPv6 peer does not clear.
func TestConnected(t *testing.T) {
	sk := new(lookup.Socket)
	for _, tc := range []struct {
		name        string
		bound, peer string
		src         string
		oldDevice   int32
		oldPeer4    uint32
		wantDevice  int32
		wantPeer4   uint32
	}{
		{"IPv4", "0.0.0.0", "192.0.2.9:53", "192.0.2.1", 7, 0, 7, 0},
		{"dual-stack, IPv4 peer", "::", "[::ffff:192.0.2.9]:53", "192.0.2.1", 7, 0, 7, 192<<24 | 2<<8 | 9},
		{"dual-stack, IPv6 peer after an IPv4 one", "::", "[2001:db8::9]:53", "2001:db8::1", 7, 42, 7, 42},
		{"link-local peer", "::", "[fe80::9%3]:53", "fe80::1", 0, 0, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Bind(netip.MustParseAddr(tc.bound), false, 0, nil)
			require.NoError(t, err)
			old := &lookup.Entry{Face: lookup.Face{Port: 5353, Device: tc.oldDevice, Ref: lookup.Ref{Sock: sk, Word: 11}}, Owner: 1000, Peer4: tc.oldPeer4}
			l.SetOn(old)
			nl, p, err := Connect(LocalOf(old), int(old.Device), netip.MustParseAddrPort(tc.peer), netip.MustParseAddr(tc.src), nil)
			require.NoError(t, err)
			e := nl.Connected(old, p)
			assert.Equal(t, nl, LocalOf(e), "local side")
			assert.True(t, e.Has(lookup.Connected))
			assert.Equal(t, p.Addr, e.Remote)
			assert.Equal(t, uint16(53), e.RemotePort)
			assert.Equal(t, uint16(5353), e.Port)
			assert.Equal(t, uint32(1000), e.Owner)
			assert.Equal(t, old.Ref, e.Ref)
			assert.Equal(t, tc.wantDevice, e.Device, "device")
			assert.Equal(t, tc.wantPeer4, e.Peer4, "IPv4 peer")
		})
	}
}
