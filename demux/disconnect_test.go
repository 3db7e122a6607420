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

var (
	ap = netip.MustParseAddrPort
	ad = netip.MustParseAddr
)

// receiver returns the value of the socket that receives src → dst on
// ifindex, or "" if none does.
func receiver(tab *demux.Table[string], src, dst string, ifindex int) string {
	_, v := tab.Lookup(ap(src), ap(dst), ifindex)
	return v
}

// TestDisconnect checks each case against what Linux 6.18 did with real
// sockets (connect with AF_UNSPEC, getsockname, SO_BINDTOIFINDEX and
// datagrams on loopback in a network namespace).
func TestDisconnect(t *testing.T) {
	type env struct {
		t   *testing.T
		tab *demux.Table[string]
	}
	bind := func(e env, o demux.Options, v string) *demux.Socket[string] {
		s, err := e.tab.Bind(o, v)
		require.NoError(e.t, err)
		return s
	}
	cases := []struct {
		name string
		run  func(e env)
	}{
		{"wildcard gets its address back", func(e env) {
			s := bind(e, demux.Options{Addr: ad("0.0.0.0"), Port: 5000}, "s")
			require.NoError(e.t, s.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			assert.Equal(e.t, "", receiver(e.tab, "127.0.0.2:7000", "127.0.0.3:5000", 1))
			require.NoError(e.t, s.Disconnect())
			assert.Equal(e.t, ap("0.0.0.0:5000"), s.LocalAddr())
			assert.False(e.t, s.Connected())
			assert.Equal(e.t, netip.AddrPort{}, s.RemoteAddr())
			assert.Equal(e.t, "s", receiver(e.tab, "127.0.0.2:7000", "127.0.0.3:5000", 1))
		}},
		{"dual-stack wildcard drops the placeholder", func(e env) {
			s := bind(e, demux.Options{Addr: ad("::"), Port: 5003}, "s")
			require.NoError(e.t, s.Connect(ap("[::1]:6000"), ad("::1")))
			assert.Equal(e.t, "", receiver(e.tab, "127.0.0.2:7000", "127.0.0.3:5003", 1))
			require.NoError(e.t, s.Disconnect())
			assert.Equal(e.t, ap("[::]:5003"), s.LocalAddr())
			assert.Equal(e.t, "s", receiver(e.tab, "127.0.0.2:7000", "127.0.0.3:5003", 1))
			assert.Equal(e.t, "s", receiver(e.tab, "[::1]:7001", "[::1]:5003", 1))
			assert.False(e.t, s.Options().V6Only)
		}},
		{"v4-mapped wildcard keeps its source", func(e env) {
			s := bind(e, demux.Options{Addr: ad("::ffff:0.0.0.0"), Port: 5070}, "s")
			require.NoError(e.t, s.Connect(ap("[::ffff:127.0.0.1]:6000"), ad("::ffff:127.0.0.1")))
			require.NoError(e.t, s.Disconnect())
			assert.Equal(e.t, ap("[::ffff:127.0.0.1]:5070"), s.LocalAddr())
			assert.Equal(e.t, "s", receiver(e.tab, "127.0.0.2:7000", "127.0.0.1:5070", 1))
			assert.Equal(e.t, "", receiver(e.tab, "127.0.0.2:7000", "127.0.0.3:5070", 1))
		}},
		{"a rehashed wildcard wins ties", func(e env) {
			a := bind(e, demux.Options{Addr: ad("0.0.0.0"), Port: 5040, ReuseAddr: true}, "A")
			bind(e, demux.Options{Addr: ad("0.0.0.0"), Port: 5040, ReuseAddr: true}, "B")
			assert.Equal(e.t, "B", receiver(e.tab, "127.0.0.1:7000", "127.0.0.1:5040", 1))
			require.NoError(e.t, a.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			// C binds after A's connect rehashed A: the disconnect's
			// rehash, not the connect's, puts A ahead of it.
			bind(e, demux.Options{Addr: ad("0.0.0.0"), Port: 5040, ReuseAddr: true}, "C")
			assert.Equal(e.t, "C", receiver(e.tab, "127.0.0.1:7000", "127.0.0.1:5040", 1))
			require.NoError(e.t, a.Disconnect())
			assert.Equal(e.t, "A", receiver(e.tab, "127.0.0.1:7000", "127.0.0.1:5040", 1))
		}},
		{"a specific socket keeps its place", func(e env) {
			a := bind(e, demux.Options{Addr: ad("127.0.0.1"), Port: 5040, ReuseAddr: true}, "A")
			bind(e, demux.Options{Addr: ad("127.0.0.1"), Port: 5040, ReuseAddr: true}, "B")
			require.NoError(e.t, a.Connect(ap("127.0.0.1:6000"), netip.Addr{}))
			require.NoError(e.t, a.Disconnect())
			assert.Equal(e.t, ap("127.0.0.1:5040"), a.LocalAddr())
			assert.Equal(e.t, "B", receiver(e.tab, "127.0.0.1:7000", "127.0.0.1:5040", 1))
		}},
		{"4-tuple precedence after disconnect", func(e env) {
			for _, addr := range []string{"127.0.0.1", "0.0.0.0"} {
				for _, again := range []string{"A", "B"} {
					e.t.Run(addr+"/"+again, func(t *testing.T) {
						tab, err := demux.New[string](demux.Config{})
						require.NoError(t, err)
						e := env{t, tab}
						ss := map[string]*demux.Socket[string]{}
						for _, v := range []string{"A", "B"} {
							ss[v] = bind(e, demux.Options{Addr: ad(addr), Port: 5010, ReuseAddr: true}, v)
						}
						for _, v := range []string{"A", "B"} {
							require.NoError(t, ss[v].Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
						}
						got := func() string { return receiver(tab, "127.0.0.1:6000", "127.0.0.1:5010", 1) }
						before := got()
						require.NoError(t, ss[again].Disconnect())
						disc := got()
						require.NoError(t, ss[again].Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
						// Linux 6.18: a specific socket's first 4-tuple
						// survives the disconnect, a wildcard's does not.
						want := map[string][3]string{
							"127.0.0.1/A": {"B", "B", "B"}, "0.0.0.0/A": {"B", "B", "A"},
							"127.0.0.1/B": {"B", "A", "B"}, "0.0.0.0/B": {"B", "A", "B"},
						}[addr+"/"+again]
						assert.Equal(t, want, [3]string{before, disc, got()})
					})
				}
			}
		}},
		{"the device is unbound", func(e env) {
			d := bind(e, demux.Options{Addr: ad("0.0.0.0"), Port: 5060, Device: 3}, "dev")
			assert.Equal(e.t, "", receiver(e.tab, "127.0.0.1:7000", "127.0.0.1:5060", 1))
			require.NoError(e.t, d.Disconnect())
			assert.Equal(e.t, 0, d.Options().Device)
			assert.Equal(e.t, "dev", receiver(e.tab, "127.0.0.1:7000", "127.0.0.1:5060", 1))

			z := bind(e, demux.Options{Addr: ad("fe80::1%3"), Port: 5030}, "zone")
			require.NoError(e.t, z.Connect(ap("[fe80::2%3]:6000"), netip.Addr{}))
			require.NoError(e.t, z.Disconnect())
			assert.Equal(e.t, ap("[fe80::1]:5030"), z.LocalAddr())
			assert.Equal(e.t, 0, z.Options().Device)

			w := bind(e, demux.Options{Addr: ad("::"), Port: 5031}, "wild")
			require.NoError(e.t, w.Connect(ap("[fe80::2%3]:6000"), ad("fe80::1")))
			assert.Equal(e.t, 3, w.Options().Device)
			require.NoError(e.t, w.Disconnect())
			assert.Equal(e.t, ap("[::]:5031"), w.LocalAddr())
			assert.Equal(e.t, 0, w.Options().Device)
		}},
		{"a ReusePort socket joins its group again, last", func(e env) {
			var ss []*demux.Socket[string]
			for _, v := range []string{"0", "1", "2"} {
				ss = append(ss, bind(e, demux.Options{Addr: ad("0.0.0.0"), Port: 443, ReusePort: true}, v))
			}
			g, _ := ss[1].Group()
			require.NoError(e.t, ss[0].Connect(ap("198.18.0.1:9"), ad("10.0.0.1")))
			assert.Equal(e.t, 2, g.Members().Len())
			require.NoError(e.t, ss[0].Disconnect())
			g0, ok := ss[0].Group()
			require.True(e.t, ok)
			assert.True(e.t, g0 == g, "joined another group")
			var vs []string
			for _, s := range g.Members().All() {
				vs = append(vs, s.Value())
			}
			// 0 left, 2 took its place, 0 came back last.
			assert.Equal(e.t, []string{"2", "1", "0"}, vs)
			// Disconnecting an unconnected member changes nothing.
			require.NoError(e.t, ss[1].Disconnect())
			assert.Equal(e.t, 3, g.Members().Len())
			assert.Same(e.t, ss[1], g.Members().At(1))
		}},
		{"bind(0) keeps its port", func(e env) {
			s := bind(e, demux.Options{Addr: ad("0.0.0.0")}, "eph")
			p := s.LocalAddr().Port()
			require.NoError(e.t, s.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			require.NoError(e.t, s.Disconnect())
			assert.Equal(e.t, p, s.LocalAddr().Port())
		}},
		{"closed and foreign sockets", func(e env) {
			s := bind(e, demux.Options{Addr: ad("0.0.0.0"), Port: 5090}, "s")
			other, err := demux.New[string](demux.Config{})
			require.NoError(e.t, err)
			assert.ErrorIs(e.t, other.Disconnect(s), syscall.EBADF)
			require.NoError(e.t, s.Close())
			assert.ErrorIs(e.t, s.Disconnect(), syscall.EBADF)
			var zero demux.Socket[string]
			assert.ErrorIs(e.t, zero.Disconnect(), syscall.EBADF)
		}},
	}
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		for _, tc := range cases {
			t.Run(c.Name+"/"+tc.name, func(t *testing.T) {
				tab, err := demux.New[string](cfg)
				require.NoError(t, err)
				tc.run(env{t, tab})
				require.NoError(t, tab.Verify())
			})
		}
	}
}
