package demux_test

import (
	"errors"
	mrand "math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// errBoom is what every armed callback of TestCallbackPanics panics with.
var errBoom = errors.New("boom")

// armed is a switch that the test's callbacks read: they panic while it
// is on.
type armed struct{ on atomic.Bool }

func (a *armed) check() {
	if a.on.Load() {
		panic(errBoom)
	}
}

// armedSource is a random source that panics while armed.
type armedSource struct {
	a   *armed
	src *mrand.PCG
}

func (s armedSource) Uint64() uint64 { s.a.check(); return s.src.Uint64() }

// Ports of the panic fixture. With 256 fixed slots, panicSharer shares the
// primary slot of panicNew, the port a panicking bind was about to use.
const (
	panicGroupPort = 5300 // an SO_REUSEPORT group of two on 10.0.0.1
	panicMcastPort = 5301 // two ReuseAddr sockets on 0.0.0.0
	panicNew       = 5302 // no socket: the trigger's bind uses it
	panicSharer    = panicNew + 256
)

// panicFixture is what every case of TestCallbackPanics starts from.
type panicFixture struct {
	group demux.Group[int]
	lone  *demux.Socket[int] // alone on its port, panicNew+1
}

// TestCallbackPanics holds the rule that the package documentation states
// for a callback that panics: the panic reaches the caller of the method
// that called it, the operation is undone if it had not taken effect (a
// bind) or complete if it had (a close), no lock stays held, the table
// passes Verify and counts its sockets right, and the next operations on
// the same port, on a port that shares its fixed slot, and bind(0) work.
// Every callback the API takes has a case, on both storages.
func TestCallbackPanics(t *testing.T) {
	v4 := func(s string, port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), port) }
	src := v4("192.0.2.7", 4000)
	mcast := v4("239.1.1.1", panicMcastPort)
	cases := []struct {
		name string
		// trigger runs the operation whose callback panics.
		trigger func(tab *demux.Table[int], f *panicFixture)
		// bound is how the trigger changes the number of sockets.
		bound int
	}{
		{"OnPort/bind", func(tab *demux.Table[int], _ *panicFixture) {
			_, _ = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: panicNew}, 1)
		}, 0},
		{"OnPort/bind0", func(tab *demux.Table[int], _ *panicFixture) {
			_, _ = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified()}, 1)
		}, 0},
		{"OnPort/close", func(_ *demux.Table[int], f *panicFixture) { _ = f.lone.Close() }, -1},
		{"OnAddr/bind", func(tab *demux.Table[int], _ *panicFixture) {
			_, _ = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: panicNew}, 1)
		}, 0},
		{"OnAddr/bind-shared-port", func(tab *demux.Table[int], _ *panicFixture) {
			_, _ = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: panicMcastPort, ReuseAddr: true}, 1)
		}, 0},
		{"OnAddr/bind0", func(tab *demux.Table[int], _ *panicFixture) {
			_, _ = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified()}, 1)
		}, 0},
		{"OnAddr/close", func(_ *demux.Table[int], f *panicFixture) { _ = f.lone.Close() }, -1},
		{"Rand/bind0", func(tab *demux.Table[int], _ *panicFixture) {
			_, _ = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified()}, 1)
		}, 0},
		{"IsLocal/bind", func(tab *demux.Table[int], _ *panicFixture) {
			_, _ = tab.Bind(demux.Options{Addr: netip.MustParseAddr("10.9.9.9"), Port: panicNew}, 1)
		}, 0},
		{"ZoneIndex/bind", func(tab *demux.Table[int], _ *panicFixture) {
			_, _ = tab.Bind(demux.Options{Addr: netip.MustParseAddr("fe80::1%eth0"), Port: panicNew}, 1)
		}, 0},
		{"ZoneIndex/connect", func(_ *demux.Table[int], f *panicFixture) {
			_ = f.lone.Connect(netip.MustParseAddrPort("[fe80::2%eth0]:53"), netip.Addr{})
		}, 0},
		{"Selector/Lookup", func(tab *demux.Table[int], _ *panicFixture) {
			tab.Lookup(src, v4("10.0.0.1", panicGroupPort), 1)
		}, 0},
		{"Selector/LookupBatch", func(tab *demux.Table[int], _ *panicFixture) {
			ds := []demux.Datagram{{Src: src, Dst: v4("10.0.0.1", panicGroupPort), Ifindex: 1}}
			tab.LookupBatch(ds, make([]*demux.Socket[int], 1))
		}, 0},
		{"Selector/Pick", func(_ *demux.Table[int], f *panicFixture) {
			f.group.Pick(src, v4("10.0.0.1", panicGroupPort), 1)
		}, 0},
		{"Rendezvous/key", func(tab *demux.Table[int], _ *panicFixture) {
			tab.Lookup(src, v4("10.0.0.1", panicGroupPort), 1)
		}, 0},
		{"LookupMulticast/yield", func(tab *demux.Table[int], _ *panicFixture) {
			tab.LookupMulticast(src, mcast, 1, func(*demux.Socket[int], int) bool { panic(errBoom) })
		}, 0},
		{"Multicast/body", func(tab *demux.Table[int], _ *panicFixture) {
			for range tab.Multicast(src, mcast, 1) {
				panic(errBoom)
			}
		}, 0},
		{"Sockets/body", func(tab *demux.Table[int], _ *panicFixture) {
			for range tab.Sockets() {
				panic(errBoom)
			}
		}, 0},
		{"Ports/body", func(tab *demux.Table[int], _ *panicFixture) {
			for range tab.Ports() {
				panic(errBoom)
			}
		}, 0},
		{"Members/body", func(_ *demux.Table[int], f *panicFixture) {
			for range f.group.Members().All() {
				panic(errBoom)
			}
		}, 0},
	}
	for _, st := range demuxtest.Storages() {
		for _, c := range cases {
			t.Run(st.Name+"/"+c.name, func(t *testing.T) {
				// OnAddr has a switch of its own: the other cases' binds
				// and closes call it too.
				var a, onAddr armed
				inUse := map[uint16]bool{} // the ports that OnPort was told of
				cfg := st.Table
				cfg.OnPort = func(port uint16, used bool) error {
					a.check()
					inUse[port] = used
					return nil
				}
				cfg.OnAddr = func(netip.AddrPort, bool, bool) error { onAddr.check(); return nil }
				cfg.IsLocal = func(netip.Addr, int) bool { a.check(); return true }
				cfg.ZoneIndex = func(zone string) (int, error) { a.check(); return strconv.Atoi(zone) }
				cfg.Rand = armedSource{a: &a, src: mrand.NewPCG(1, 2)}
				tab, err := demux.New[int](cfg)
				require.NoError(t, err)
				f := panicSetup(t, tab, &a, c.name)
				want := tab.Len() + c.bound

				sw := &a
				if strings.HasPrefix(c.name, "OnAddr/") {
					sw = &onAddr
				}
				sw.on.Store(true)
				panicked := func() (r any) {
					defer func() { r = recover() }()
					c.trigger(tab, f)
					return nil
				}()
				sw.on.Store(false)
				assert.Equal(t, errBoom, panicked, "the callback's panic reaches the caller")

				assert.NoError(t, tab.Verify())
				n := 0
				for range tab.Sockets() {
					n++
				}
				assert.Equal(t, want, n, "sockets listed")
				assert.Equal(t, want, tab.Len())
				assert.Equal(t, want, tab.Stats().Sockets)
				if c.bound < 0 {
					assert.True(t, f.lone.Closed(), "a close whose hook panicked has happened")
				}
				if !strings.HasPrefix(c.name, "OnPort/") {
					// The port events of a bind undone, and of a close
					// complete, were made.
					var told []uint16
					for p, used := range inUse {
						if used {
							told = append(told, p)
						}
					}
					slices.Sort(told)
					assert.Equal(t, slices.Collect(tab.Ports()), told, "ports OnPort was told are in use")
				}
				panicNextOps(t, tab)
			})
		}
	}
}

// panicSetup binds the fixture, with the callbacks disarmed, and gives the
// group the selector the case needs.
func panicSetup(t *testing.T, tab *demux.Table[int], a *armed, name string) *panicFixture {
	bind := func(o demux.Options) *demux.Socket[int] {
		s, err := tab.Bind(o, int(o.Port))
		require.NoError(t, err)
		return s
	}
	f := &panicFixture{}
	for range 2 {
		s := bind(demux.Options{Addr: netip.MustParseAddr("10.0.0.1"), Port: panicGroupPort, ReusePort: true})
		f.group, _ = s.Group()
	}
	for range 2 {
		bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: panicMcastPort, ReuseAddr: true})
	}
	f.lone = bind(demux.Options{Addr: netip.IPv6Unspecified(), V6Only: true, Port: panicNew + 1})
	switch name {
	case "Rendezvous/key":
		f.group.SetSelector(demux.Rendezvous(func(*demux.Socket[int]) uint64 { a.check(); return 1 }))
	default:
		f.group.SetSelector(func(demux.Datagram, uint32, demux.Members[int]) int { a.check(); return -1 })
	}
	return f
}

// panicNextOps checks that the table still works after a panic: binds
// and closes on the port the panicking bind was about to use, on one that
// shares its fixed slot, by bind(0), and on the fixture's ports, and a
// lookup. They run under a deadline, since a lock left held makes them
// wait forever.
func panicNextOps(t *testing.T, tab *demux.Table[int]) {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			for _, port := range []uint16{panicNew, panicSharer, 0, panicGroupPort, panicNew + 1} {
				s, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("10.0.0.9"), Port: port}, 9)
				if err != nil {
					return err
				}
				if got, _ := tab.Lookup(netip.MustParseAddrPort("192.0.2.1:1"), s.LocalAddr(), 1); got != s {
					return errors.New("bound socket not found")
				}
				if err := s.Close(); err != nil {
					return err
				}
			}
			return tab.Verify()
		}()
	}()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the operations after the panic did not return: a lock is still held")
	}
}
