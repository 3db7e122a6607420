package demux_test

import (
	"math"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestSetDevice checks SO_BINDTODEVICE after bind against what Linux 6.18
// did with real sockets on loopback (interface 1) and a veth (here 3).
func TestSetDevice(t *testing.T) {
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
			any4 := netip.IPv4Unspecified()

			// Delivery follows the device, set and unset.
			a := bind(demux.Options{Addr: any4, Port: 5300}, "A")
			require.NoError(t, a.SetDevice(3))
			assert.Equal(t, 3, a.Options().Device)
			assert.Equal(t, "", receiver(tab, "127.0.0.1:7000", "127.0.0.1:5300", 1))
			assert.Equal(t, "A", receiver(tab, "127.0.0.1:7000", "127.0.0.1:5300", 3))
			require.NoError(t, a.SetDevice(0))
			assert.Equal(t, "A", receiver(tab, "127.0.0.1:7000", "127.0.0.1:5300", 1))

			// The socket keeps its place for ties: B, bound later, wins
			// although A was set last.
			a = bind(demux.Options{Addr: any4, Port: 5301, ReuseAddr: true}, "A")
			b := bind(demux.Options{Addr: any4, Port: 5301, ReuseAddr: true}, "B")
			require.NoError(t, b.SetDevice(1))
			require.NoError(t, a.SetDevice(1))
			assert.Equal(t, "B", receiver(tab, "127.0.0.1:7000", "127.0.0.1:5301", 1))

			// A connected socket keeps its peer.
			c := bind(demux.Options{Addr: any4, Port: 5701}, "C")
			require.NoError(t, c.Connect(ap("127.0.0.1:7000"), ad("127.0.0.1")))
			require.NoError(t, c.SetDevice(3))
			assert.Equal(t, ap("127.0.0.1:7000"), c.RemoteAddr())
			assert.Equal(t, "", receiver(tab, "127.0.0.1:7000", "127.0.0.1:5701", 1))
			assert.Equal(t, "C", receiver(tab, "127.0.0.1:7000", "127.0.0.1:5701", 3))

			// A link-local socket may leave the interface of its zone.
			ll := bind(demux.Options{Addr: ad("fe80::1%3"), Port: 5700}, "LL")
			require.NoError(t, ll.SetDevice(1))
			assert.Equal(t, ap("[fe80::1%1]:5700"), ll.LocalAddr())
			require.NoError(t, ll.SetDevice(0))
			assert.Equal(t, ap("[fe80::1]:5700"), ll.LocalAddr())

			// Later binds see the new device; nothing already bound is
			// checked.
			d := bind(demux.Options{Addr: any4, Port: 5302, Device: 3}, "D")
			bind(demux.Options{Addr: any4, Port: 5302, Device: 1}, "E")
			require.NoError(t, d.SetDevice(1))
			_, err = tab.Bind(demux.Options{Addr: any4, Port: 5302, Device: 3}, "F")
			require.NoError(t, err, "the port is free on device 3 now")
			_, err = tab.Bind(demux.Options{Addr: any4, Port: 5302}, "G")
			require.ErrorIs(t, err, syscall.EADDRINUSE)

			// A ReusePort socket leaves its group, and joins the group on
			// its new device.
			var gs []*demux.Socket[string]
			for _, v := range []string{"g0", "g1", "g2"} {
				gs = append(gs, bind(demux.Options{Addr: any4, Port: 5400, ReusePort: true}, v))
			}
			l1 := bind(demux.Options{Addr: any4, Port: 5400, ReusePort: true, Device: 1}, "l1")
			g, _ := gs[0].Group()
			require.NoError(t, gs[1].SetDevice(1))
			assert.Equal(t, []string{"g0", "g2"}, groupValues(g))
			lg, _ := l1.Group()
			assert.Equal(t, []string{"l1", "g1"}, groupValues(lg))
			g1, _ := gs[1].Group()
			assert.True(t, g1 == lg)

			// Errors leave the socket as it was.
			require.ErrorIs(t, d.SetDevice(-1), syscall.EINVAL)
			if math.MaxInt > math.MaxInt32 {
				require.ErrorIs(t, d.SetDevice(math.MaxInt32+1), syscall.EINVAL)
			}
			assert.Equal(t, 1, d.Options().Device)
			other, err := demux.New[string](demux.Config{})
			require.NoError(t, err)
			require.ErrorIs(t, other.SetDevice(d, 2), syscall.EBADF)
			require.NoError(t, d.Close())
			require.ErrorIs(t, d.SetDevice(2), syscall.EBADF)
			var zero demux.Socket[string]
			require.ErrorIs(t, zero.SetDevice(2), syscall.EBADF)
			require.NoError(t, tab.Verify())
		})
	}
}

func groupValues(g demux.Group[string]) []string {
	var out []string
	for _, s := range g.Members().All() {
		out = append(out, s.Value())
	}
	return out
}

// TestSetDeviceRehash4 checks that SetDevice, like Linux's SO_BINDTODEVICE,
// rehashes a socket that is in the 4-tuple hash even when the device does
// not change: its entry moves to its current 4-tuple, as the newest
// (TestKernelRehash, "setdev: ...", checks the same against the kernel).
func TestSetDeviceRehash4(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, bind func(port uint16, v string) *demux.Socket[string], recv func(port uint16) string)
	}{
		{"a connected socket's entry moves to its current peer", func(t *testing.T, bind func(uint16, string) *demux.Socket[string], recv func(uint16) string) {
			a := bind(5702, "A")
			require.NoError(t, a.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			b := bind(5702, "B")
			require.NoError(t, b.Connect(ap("127.0.0.1:6001"), ad("127.0.0.1")))
			require.NoError(t, b.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			assert.Equal(t, "A", recv(5702), "B's entry is still at its first peer")
			require.NoError(t, b.SetDevice(0)) // the same device
			assert.Equal(t, "B", recv(5702), "the rehash moved B's entry to its current peer, as the newest")
		}},
		{"the moved entry is newer than every other, whenever the socket was bound", func(t *testing.T, bind func(uint16, string) *demux.Socket[string], recv func(uint16) string) {
			b := bind(5706, "B")
			a := bind(5706, "A")
			require.NoError(t, b.Connect(ap("127.0.0.1:6001"), ad("127.0.0.1")))
			require.NoError(t, a.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			require.NoError(t, b.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			assert.Equal(t, "A", recv(5706))
			require.NoError(t, b.SetDevice(0))
			assert.Equal(t, "B", recv(5706))
		}},
		{"a disconnected socket's entry moves to no peer, for good", func(t *testing.T, bind func(uint16, string) *demux.Socket[string], recv func(uint16) string) {
			a := bind(5703, "A")
			require.NoError(t, a.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			b := bind(5703, "B")
			require.NoError(t, b.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			assert.Equal(t, "B", recv(5703))
			require.NoError(t, b.Disconnect())
			assert.Equal(t, "A", recv(5703))
			require.NoError(t, b.SetDevice(0))
			require.NoError(t, b.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			assert.Equal(t, "A", recv(5703), "B's reconnect does not regain the entry it moved away")
		}},
		{"without SetDevice a reconnect regains the entry", func(t *testing.T, bind func(uint16, string) *demux.Socket[string], recv func(uint16) string) {
			a := bind(5704, "A")
			require.NoError(t, a.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			b := bind(5704, "B")
			require.NoError(t, b.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			require.NoError(t, b.Disconnect())
			require.NoError(t, b.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			assert.Equal(t, "B", recv(5704))
		}},
		{"an entry already at its current 4-tuple stays where it is", func(t *testing.T, bind func(uint16, string) *demux.Socket[string], recv func(uint16) string) {
			b := bind(5707, "B")
			require.NoError(t, b.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			a := bind(5707, "A")
			require.NoError(t, a.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			assert.Equal(t, "A", recv(5707))
			require.NoError(t, b.SetDevice(0))
			assert.Equal(t, "A", recv(5707), "Linux moves an entry only to another slot")
		}},
		{"a socket never connected has nothing to move", func(t *testing.T, bind func(uint16, string) *demux.Socket[string], recv func(uint16) string) {
			a := bind(5705, "A")
			require.NoError(t, a.Connect(ap("127.0.0.1:6000"), ad("127.0.0.1")))
			b := bind(5705, "B")
			require.NoError(t, b.SetDevice(0))
			assert.Equal(t, "A", recv(5705))
		}},
	}
	for _, conf := range demuxtest.Configs() {
		cfg := conf.Table
		for _, c := range cases {
			t.Run(conf.Name+"/"+c.name, func(t *testing.T) {
				tab, err := demux.New[string](cfg)
				require.NoError(t, err)
				bind := func(port uint16, v string) *demux.Socket[string] {
					s, err := tab.Bind(demux.Options{Addr: ad("127.0.0.1"), Port: port, ReuseAddr: true}, v)
					require.NoError(t, err)
					return s
				}
				recv := func(port uint16) string {
					return receiver(tab, "127.0.0.1:6000", netip.AddrPortFrom(ad("127.0.0.1"), port).String(), 1)
				}
				c.run(t, bind, recv)
				require.NoError(t, tab.Verify())
			})
		}
	}
}
