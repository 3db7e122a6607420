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

// TestConnectKeepsWildcard: a connect whose routing found no source address
// (the caller passes the unspecified address) keeps the wildcard, as Linux
// 6.18 does for a device without an IPv4 address: the socket takes its
// peer's datagrams to any address, competes by score (connected beats an
// unconnected wildcard, an exact address beats it), keeps its place for
// ties, and gets the 4-tuple precedence only from its first connect with
// an address. An IPv6 peer without a source fails with EADDRNOTAVAIL.
func TestConnectKeepsWildcard(t *testing.T) {
	peer := ap("10.0.0.2:6000")
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			tab, err := demux.New[string](cfg)
			require.NoError(t, err)
			bind := func(o demux.Options, v string) *demux.Socket[string] {
				s, err := tab.Bind(o, v)
				require.NoError(t, err)
				return s
			}
			a := bind(demux.Options{Addr: ad("0.0.0.0"), Port: 5100, ReuseAddr: true}, "a")
			require.NoError(t, a.Connect(peer, ad("0.0.0.0")))
			assert.Equal(t, ap("0.0.0.0:5100"), a.LocalAddr())
			assert.Equal(t, peer, a.RemoteAddr())
			assert.Equal(t, "a", receiver(tab, "10.0.0.2:6000", "127.0.0.1:5100", 1))
			assert.Equal(t, "a", receiver(tab, "10.0.0.2:6000", "10.9.9.9:5100", 1))
			assert.Equal(t, "", receiver(tab, "10.0.0.3:6000", "127.0.0.1:5100", 1))
			w := bind(demux.Options{Addr: ad("0.0.0.0"), Port: 5100, ReuseAddr: true}, "w")
			assert.Equal(t, "a", receiver(tab, "10.0.0.2:6000", "127.0.0.1:5100", 1), "connected beats a newer wildcard")
			assert.Equal(t, "w", receiver(tab, "10.0.0.3:6000", "127.0.0.1:5100", 1))
			bind(demux.Options{Addr: ad("127.0.0.1"), Port: 5100, ReuseAddr: true}, "x")
			assert.Equal(t, "x", receiver(tab, "10.0.0.2:6000", "127.0.0.1:5100", 1), "an exact address beats it")
			// Connecting without a source does not rehash: w, bound after
			// a, wins their tie although a connected last.
			require.NoError(t, w.Connect(peer, ad("0.0.0.0")))
			require.NoError(t, a.Connect(peer, ad("0.0.0.0")))
			assert.Equal(t, "w", receiver(tab, "10.0.0.2:6000", "10.9.9.9:5100", 1))
			// Nor for a dual-stack socket, whose "::" becomes
			// ::ffff:0.0.0.0 under the same hash key.
			b1 := bind(demux.Options{Addr: ad("::"), Port: 5104, ReuseAddr: true}, "b1")
			b2 := bind(demux.Options{Addr: ad("::"), Port: 5104, ReuseAddr: true}, "b2")
			require.NoError(t, b2.Connect(ap("[::ffff:10.0.0.2]:6000"), ad("0.0.0.0")))
			require.NoError(t, b1.Connect(ap("[::ffff:10.0.0.2]:6000"), ad("0.0.0.0")))
			assert.Equal(t, "b2", receiver(tab, "10.0.0.2:6000", "127.0.0.1:5104", 1))

			// Dual-stack: the local address shows as ::ffff:0.0.0.0, and
			// the socket can no longer reach an IPv6 peer.
			b := bind(demux.Options{Addr: ad("::"), Port: 5102}, "b")
			require.NoError(t, b.Connect(ap("[::ffff:10.0.0.2]:6000"), ad("0.0.0.0")))
			assert.Equal(t, ap("[::ffff:0.0.0.0]:5102"), b.LocalAddr())
			assert.Equal(t, "b", receiver(tab, "10.0.0.2:6000", "127.0.0.1:5102", 1))
			require.ErrorIs(t, b.Connect(ap("[2001:db8::2]:6000"), ad("::")), syscall.EAFNOSUPPORT)
			require.NoError(t, b.Disconnect())
			assert.Equal(t, ap("[::]:5102"), b.LocalAddr())

			// No IPv6 source: EADDRNOTAVAIL; the other family's unspecified
			// address: EINVAL. The socket is unchanged.
			c := bind(demux.Options{Addr: ad("::"), Port: 5103, V6Only: true}, "c")
			require.ErrorIs(t, c.Connect(ap("[2001:db8::2]:6000"), ad("::")), syscall.EADDRNOTAVAIL)
			require.ErrorIs(t, c.Connect(ap("[2001:db8::2]:6000"), ad("0.0.0.0")), syscall.EINVAL)
			require.ErrorIs(t, a.Connect(peer, ad("::")), syscall.EINVAL)
			assert.False(t, c.Connected())

			// The first connect with an address is the first for the
			// 4-tuple precedence: d connects with 10.0.0.9 after e did,
			// and wins although e scores more (bound to a device).
			d := bind(demux.Options{Addr: ad("0.0.0.0"), Port: 5200, ReuseAddr: true}, "d")
			require.NoError(t, d.Connect(peer, ad("0.0.0.0")))
			e := bind(demux.Options{Addr: ad("10.0.0.9"), Port: 5200, ReuseAddr: true, Device: 1}, "e")
			require.NoError(t, e.Connect(peer, netip.Addr{}))
			assert.Equal(t, "e", receiver(tab, "10.0.0.2:6000", "10.0.0.9:5200", 1))
			require.NoError(t, d.Connect(peer, ad("10.0.0.9")))
			assert.Equal(t, "d", receiver(tab, "10.0.0.2:6000", "10.0.0.9:5200", 1))
			require.NoError(t, tab.Verify())
		})
	}
}
