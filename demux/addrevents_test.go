package demux_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// eventLog records OnPort and OnAddr events in the order they come, and
// vetoes an address's bind while veto names it.
type eventLog struct {
	tbl *demux.Table[string]
	// peer, probe and ifindex are a datagram that the socket being
	// bound or closed receives once published.
	peer, probe netip.AddrPort
	ifindex     int
	events      []string
	veto        map[netip.Addr]error
}

func (l *eventLog) onPort(port uint16, inUse bool) error {
	l.events = append(l.events, fmt.Sprintf("port %d %v", port, inUse))
	return nil
}

func (l *eventLog) onAddr(local netip.AddrPort, v6Only, bound bool) error {
	// What a lookup finds from inside the hook shows whether the socket
	// is published yet (bind) or still (close).
	s, _ := l.tbl.Lookup(l.peer, l.probe, l.ifindex)
	l.events = append(l.events, fmt.Sprintf("addr %v v6only=%v %v found=%v", local, v6Only, bound, s != nil))
	if bound {
		return l.veto[local.Addr()]
	}
	return nil
}

func (l *eventLog) take() []string {
	e := l.events
	l.events = nil
	return e
}

// TestAddrEvents checks what OnAddr hears, for each form of address and
// on both storages: one event per bind and one per close, each with the
// address as bound (zone, v4-mapped form and V6Only as Linux leaves them),
// nested inside the port's events, before publication and after
// removal; none for a bind that fails its conflict check, nor for
// Connect and Disconnect, even when the connect changes the socket's
// local address; and a close reports what the bind reported, a
// link-local address's interface included though Disconnect unbound the
// device.
func TestAddrEvents(t *testing.T) {
	mk := func(s string, port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), port) }
	cases := []struct {
		name string
		o    demux.Options
		// event is the address event's "local v6only" part.
		event string
		// probe is an address the socket receives at.
		probe string
	}{
		{"ipv4", demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), Port: 53}, "127.0.0.2:53 v6only=false", "127.0.0.2"},
		{"ipv4 wildcard", demux.Options{Addr: netip.IPv4Unspecified(), Port: 53}, "0.0.0.0:53 v6only=false", "127.0.0.5"},
		{"ipv6 dual-stack wildcard", demux.Options{Addr: netip.IPv6Unspecified(), Port: 53}, "[::]:53 v6only=false", "127.0.0.5"},
		{"ipv6 only wildcard", demux.Options{Addr: netip.IPv6Unspecified(), Port: 53, V6Only: true}, "[::]:53 v6only=true", "::1"},
		{"v4-mapped", demux.Options{Addr: netip.MustParseAddr("::ffff:127.0.0.2"), Port: 53}, "[::ffff:127.0.0.2]:53 v6only=false", "127.0.0.2"},
		{"link-local", demux.Options{Addr: netip.MustParseAddr("fe80::1%2"), Port: 53}, "[fe80::1%2]:53 v6only=true", "fe80::1"},
		{"link-local by device", demux.Options{Addr: netip.MustParseAddr("fe80::1"), Device: 2, Port: 53}, "[fe80::1%2]:53 v6only=true", "fe80::1"},
		{"bind(0)", demux.Options{Addr: netip.MustParseAddr("127.0.0.2")}, "127.0.0.2:40000 v6only=false", "127.0.0.2"},
	}
	for _, st := range demuxtest.Storages() {
		for _, c := range cases {
			t.Run(st.Name+"/"+c.name, func(t *testing.T) {
				probe := netip.MustParseAddr(c.probe)
				peer := mk("127.0.0.9", 999)
				if probe.Is6() {
					peer = netip.MustParseAddrPort("[fe80::9]:999")
				}
				port := c.o.Port
				if port == 0 {
					port = 40000
				}
				l := &eventLog{peer: peer, probe: netip.AddrPortFrom(probe, port), ifindex: 2}
				cfg := st.Table
				cfg.OnPort, cfg.OnAddr = l.onPort, l.onAddr
				cfg.PortLow, cfg.PortHigh = 40000, 40000
				tbl, err := demux.New[string](cfg)
				require.NoError(t, err)
				l.tbl = tbl
				s, err := tbl.Bind(c.o, "s")
				require.NoError(t, err)
				require.Equal(t, port, s.LocalAddr().Port())
				got, _ := tbl.Lookup(l.peer, l.probe, l.ifindex)
				require.Same(t, s, got, "the probe finds the socket once bound")
				want := []string{fmt.Sprintf("port %d true", port), "addr " + c.event + " true found=false"}
				assert.Equal(t, want, l.take(), "bind")

				// A conflicting bind hears nothing.
				again := c.o
				again.Port = port
				_, err = tbl.Bind(again, "conflict")
				require.ErrorIs(t, err, syscall.EADDRINUSE)
				// Connect, which gives a wildcard socket a local address,
				// and Disconnect hear nothing either.
				peer, local := mk("127.0.0.9", 999), netip.MustParseAddr("127.0.0.2")
				if c.o.Addr.Is6() && !c.o.Addr.Is4In6() && (c.o.V6Only || !c.o.Addr.IsUnspecified()) {
					peer, local = netip.MustParseAddrPort("[fe80::9%2]:999"), netip.MustParseAddr("fe80::1")
				}
				if !c.o.Addr.IsUnspecified() {
					local = netip.Addr{} // a specific socket keeps its own
				}
				require.NoError(t, s.Connect(peer, local))
				require.NoError(t, s.Disconnect())
				require.NoError(t, s.Connect(peer, local))
				assert.Empty(t, l.take(), "a failed bind, Connect and Disconnect")
				l.peer, l.probe = peer, s.LocalAddr() // s is connected now

				// A second socket on the port: its events come without
				// port events; the close of the connected first reports
				// its bind's address.
				s2, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.3"), Port: port}, "s2")
				require.NoError(t, err)
				require.NoError(t, s.Close())
				// The probe of s2's event still looks for s (found: s is
				// published), that of s's close finds nothing (s is gone,
				// and s2 does not receive at the probe).
				assert.Equal(t, []string{
					fmt.Sprintf("addr 127.0.0.3:%d v6only=false true found=true", port),
					"addr " + c.event + " false found=false",
				}, l.take(), "second socket, then close of the first")
				require.NoError(t, s2.Close())
				assert.Equal(t, []string{
					fmt.Sprintf("addr 127.0.0.3:%d v6only=false false found=false", port),
					fmt.Sprintf("port %d false", port),
				}, l.take(), "close of the last")
				require.NoError(t, tbl.Verify())
			})
		}
	}
}

// TestAddrEventVeto checks that OnAddr's veto fails the bind with its
// error and leaves the table as it was, that the port event of a port
// that the vetoed bind would have brought into use is undone, and that a
// port already in use hears no port event.
func TestAddrEventVeto(t *testing.T) {
	errVeto := errors.New("address refused")
	for _, st := range demuxtest.Storages() {
		t.Run(st.Name, func(t *testing.T) {
			vetoed := netip.MustParseAddr("127.0.0.7")
			l := &eventLog{peer: netip.MustParseAddrPort("127.0.0.9:999"), veto: map[netip.Addr]error{vetoed: errVeto}}
			cfg := st.Table
			cfg.OnPort, cfg.OnAddr = l.onPort, l.onAddr
			cfg.PortLow, cfg.PortHigh = 40000, 40000
			tbl, err := demux.New[string](cfg)
			require.NoError(t, err)
			l.tbl = tbl
			_, err = tbl.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.1"), Port: 54}, "other")
			require.NoError(t, err)
			l.take()
			before := slices.Collect(tbl.Sockets())
			for _, port := range []uint16{53, 0, 54} {
				_, err := tbl.Bind(demux.Options{Addr: vetoed, Port: port}, "vetoed")
				require.ErrorIs(t, err, errVeto, "port %d", port)
				var oe *demux.OpError
				require.ErrorAs(t, err, &oe)
				assert.Equal(t, "bind", oe.Op)
				require.NoError(t, tbl.Verify())
				assert.Equal(t, before, slices.Collect(tbl.Sockets()))
				assert.Equal(t, []uint16{54}, slices.Collect(tbl.Ports()))
			}
			assert.Equal(t, []string{
				"port 53 true", "addr 127.0.0.7:53 v6only=false true found=false", "port 53 false",
				"port 40000 true", "addr 127.0.0.7:40000 v6only=false true found=false", "port 40000 false",
				"addr 127.0.0.7:54 v6only=false true found=false",
			}, l.take())
			// Once the hook agrees, the bind succeeds.
			delete(l.veto, vetoed)
			s, err := tbl.Bind(demux.Options{Addr: vetoed, Port: 53}, "ok")
			require.NoError(t, err)
			got, _ := tbl.Lookup(l.peer, s.LocalAddr(), 0)
			assert.Same(t, s, got)
		})
	}
}

// TestEphemeralTriesAnotherPort: when a port event's hook refuses the port
// that bind(0) chose with an error wrapping EADDRINUSE (the port is taken
// outside the table), bind(0) chooses another, up to 8 ports, on both
// storages and for either hook; another error, or an explicit port,
// fails at once.
func TestEphemeralTriesAnotherPort(t *testing.T) {
	taken := fmt.Errorf("held by another program: %w", syscall.EADDRINUSE)
	for _, st := range demuxtest.Storages() {
		for _, hook := range []string{"OnPort", "OnAddr"} {
			t.Run(st.Name+"/"+hook, func(t *testing.T) {
				var asked []uint16
				refuse := 0    // how many of the next ports to refuse
				var err0 error // the refusal
				check := func(port uint16) error {
					asked = append(asked, port)
					if refuse > 0 {
						refuse--
						return err0
					}
					return nil
				}
				cfg := st.Table
				cfg.PortLow, cfg.PortHigh = 40000, 40099
				if hook == "OnPort" {
					cfg.OnPort = func(port uint16, inUse bool) error {
						if !inUse {
							return nil
						}
						return check(port)
					}
				} else {
					cfg.OnAddr = func(a netip.AddrPort, _, bound bool) error {
						if !bound {
							return nil
						}
						return check(a.Port())
					}
				}
				tbl, err := demux.New[string](cfg)
				require.NoError(t, err)
				o := demux.Options{Addr: netip.MustParseAddr("127.0.0.1")}

				refuse, err0 = 3, taken
				s, err := tbl.Bind(o, "s")
				require.NoError(t, err)
				require.Len(t, asked, 4)
				assert.Equal(t, asked[3], s.LocalAddr().Port(), "bound on the port the hook accepted")
				assert.Equal(t, 1, tbl.Len())

				asked, refuse = nil, 100
				_, err = tbl.Bind(o, "never")
				require.ErrorIs(t, err, syscall.EADDRINUSE)
				assert.Len(t, asked, 8, "ports tried")

				asked, refuse, err0 = nil, 1, errors.New("other")
				_, err = tbl.Bind(o, "other error")
				require.ErrorIs(t, err, err0)
				assert.Len(t, asked, 1, "another error is not retried")

				asked, refuse, err0 = nil, 1, taken
				_, err = tbl.Bind(demux.Options{Addr: o.Addr, Port: 41000}, "explicit")
				require.ErrorIs(t, err, syscall.EADDRINUSE)
				assert.Len(t, asked, 1, "an explicit port is not changed")
				assert.Equal(t, 1, tbl.Len())
				require.NoError(t, tbl.Verify())
			})
		}
	}
}
