package demux_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
	"github.com/udpdemux/udpdemux/internal/model"
	"github.com/udpdemux/udpdemux/internal/rows"
)

// TestKernelRows runs the rows of the semantics table (DESIGN.md, package
// internal/rows), each asserting the outcome Linux 6.18 gave. Every row
// runs on the table under every configuration of demuxtest.Configs (every
// strategy, Hybrid also with thresholds 1 and 2 so that its secondary path
// runs even for short chains) and on the reference model, so that the model is checked against the kernel too. The kernel
// conformance test runs the same rows on real sockets.
//
// Interface 1 stands for lo.

const rowPort = 9000

var (
	rowPeerP = netip.MustParseAddrPort("127.0.0.2:5000") // the peer a socket connects to
	rowPeerQ = netip.MustParseAddrPort("127.0.0.2:5001") // another sender
	rowPeer6 = netip.MustParseAddrPort("[::1]:5000")
	rowLo    = 1
)

// rowSUT is a socket table under test: the demux table or the model. Sockets
// are numbered in bind order from 0 by both, so the numbers agree.
type rowSUT interface {
	bind(o demux.Options) (int, error)
	connect(id int, remote netip.AddrPort, local netip.Addr) error
	lookup(src, dst netip.AddrPort, ifindex int) (int, bool)
	disconnect(id int) error
	setDevice(id, dev int) error
	local(id int) netip.AddrPort
}

type rowTableSUT struct {
	tbl   *demux.Table[int]
	socks []*demux.Socket[int]
}

func (s *rowTableSUT) bind(o demux.Options) (int, error) {
	sock, err := s.tbl.Bind(o, len(s.socks))
	if err != nil {
		return -1, err
	}
	s.socks = append(s.socks, sock)
	return len(s.socks) - 1, nil
}

func (s *rowTableSUT) connect(id int, remote netip.AddrPort, local netip.Addr) error {
	return s.tbl.Connect(s.socks[id], remote, local)
}

func (s *rowTableSUT) lookup(src, dst netip.AddrPort, ifindex int) (int, bool) {
	sock, v := s.tbl.Lookup(src, dst, ifindex)
	return v, sock != nil
}

func (s *rowTableSUT) disconnect(id int) error     { return s.tbl.Disconnect(s.socks[id]) }
func (s *rowTableSUT) setDevice(id, dev int) error { return s.tbl.SetDevice(s.socks[id], dev) }
func (s *rowTableSUT) local(id int) netip.AddrPort { return s.socks[id].LocalAddr() }

type rowModelSUT struct{ m *model.Model }

func (s rowModelSUT) disconnect(id int) error     { return s.m.Disconnect(id) }
func (s rowModelSUT) setDevice(id, dev int) error { return s.m.SetDevice(id, dev) }
func (s rowModelSUT) local(id int) netip.AddrPort {
	for _, x := range s.m.Snapshot() {
		if x.ID == id {
			return x.Local
		}
	}
	return netip.AddrPort{}
}

// bind binds o; port 0 takes 40000, where the table would choose one.
func (s rowModelSUT) bind(o demux.Options) (int, error) {
	if o.Port == 0 {
		return s.m.BindAt(model.Options(o), 40000)
	}
	return s.m.Bind(model.Options(o))
}
func (s rowModelSUT) connect(id int, remote netip.AddrPort, local netip.Addr) error {
	return s.m.Connect(id, remote, local)
}
func (s rowModelSUT) lookup(src, dst netip.AddrPort, ifindex int) (int, bool) {
	return s.m.Lookup(src, dst, ifindex)
}

// rowEnv runs one row on one sut; reset starts over on an empty one, for
// rows with alternative outcomes ("X / Y").
type rowEnv struct {
	t     *testing.T
	fresh func() rowSUT
	s     rowSUT
	// table is the demux table of the current sut, nil for the model.
	table *demux.Table[int]
}

func (e *rowEnv) reset() { e.s = e.fresh() }

func rowOpts(addr string, f ...func(*demux.Options)) demux.Options {
	o := demux.Options{Addr: netip.MustParseAddr(addr), Port: rowPort}
	for _, fn := range f {
		fn(&o)
	}
	return o
}

func rowReuseAddr(o *demux.Options) { o.ReuseAddr = true }
func rowReusePort(o *demux.Options) { o.ReusePort = true }
func rowV6Only(o *demux.Options)    { o.V6Only = true }
func rowDevice(d int) func(*demux.Options) {
	return func(o *demux.Options) { o.Device = d }
}

// bind binds and requires success.
func (e *rowEnv) bind(o demux.Options) int {
	e.t.Helper()
	id, err := e.s.bind(o)
	require.NoError(e.t, err, "bind %v", o.Addr)
	return id
}

// bindErr binds and requires the given errno (0: success).
func (e *rowEnv) bindErr(o demux.Options, want syscall.Errno) {
	e.t.Helper()
	_, err := e.s.bind(o)
	if want == 0 {
		assert.NoError(e.t, err, "bind %v", o.Addr)
	} else {
		assert.ErrorIs(e.t, err, want, "bind %v", o.Addr)
	}
}

func (e *rowEnv) connect(id int, remote netip.AddrPort, local string) {
	e.t.Helper()
	var l netip.Addr
	if local != "" {
		l = netip.MustParseAddr(local)
	}
	require.NoError(e.t, e.s.connect(id, remote, l), "connect %d to %v", id, remote)
}

// delivers asserts that the datagram src → dst (port rowPort) on lo goes to
// socket want, or to none if want is -1.
func (e *rowEnv) delivers(src netip.AddrPort, dst string, want int) {
	e.t.Helper()
	d := netip.AddrPortFrom(netip.MustParseAddr(dst), rowPort)
	got, ok := e.s.lookup(src, d, rowLo)
	if !ok {
		got = -1
	}
	assert.Equal(e.t, want, got, "%v -> %v", src, d)
}

// rowPeers are the addresses of the rows' peers.
var rowPeers = map[rows.Peer]netip.AddrPort{
	rows.P:    rowPeerP,
	rows.Q:    rowPeerQ,
	rows.P6:   rowPeer6,
	rows.Far4: netip.MustParseAddrPort("127.0.0.99:5000"),
}

// run runs the steps of r.
func (e *rowEnv) run(r rows.Row) {
	e.t.Helper()
	for _, st := range r.Steps {
		switch st.Kind {
		case rows.Bind:
			o := demux.Options{Addr: st.Bind.Addr, Port: rowPort, ReuseAddr: st.Bind.ReuseAddr, ReusePort: st.Bind.ReusePort, V6Only: st.Bind.V6Only}
			if st.Bind.Device {
				o.Device = rowLo
			}
			e.bindErr(o, st.Errno())
		case rows.Connect:
			e.connect(st.Sock, rowPeers[st.Peer], st.Local.String())
		case rows.Send:
			e.delivers(rowPeers[st.Peer], st.Dst.String(), st.WantSock())
		case rows.Spread:
			e.spread(st)
		}
	}
}

// spread checks that st.Flows flows from st.Peer's address spread over the
// whole group of sockets 0..st.Sock, each flow always to the same member,
// and, on the table, to the member ReusePortIndex names.
func (e *rowEnv) spread(st rows.Step) {
	e.t.Helper()
	n := st.Sock + 1
	got := map[int]int{}
	for p := range st.Flows {
		src := netip.AddrPortFrom(rowPeers[st.Peer].Addr(), uint16(20000+p))
		dst := netip.AddrPortFrom(st.Dst, rowPort)
		id, ok := e.s.lookup(src, dst, rowLo)
		require.True(e.t, ok)
		require.Less(e.t, id, n)
		for range 3 {
			again, _ := e.s.lookup(src, dst, rowLo)
			require.Equal(e.t, id, again, "flow %v is not stable", src)
		}
		if e.table != nil {
			assert.Equal(e.t, e.table.ReusePortIndex(src, dst, n), id, "receiver is not the ReusePortIndex member")
		}
		got[id]++
	}
	assert.Len(e.t, got, n, "flows per member: %v", got)
}

// flowsReach checks that n flows from peer's address to dst reach every
// socket of ids and no other.
func (e *rowEnv) flowsReach(peer netip.AddrPort, dst string, n int, ids ...int) {
	e.t.Helper()
	got := map[int]int{}
	for p := range n {
		src := netip.AddrPortFrom(peer.Addr(), uint16(20000+p))
		id, ok := e.s.lookup(src, netip.AddrPortFrom(netip.MustParseAddr(dst), rowPort), rowLo)
		require.True(e.t, ok)
		require.Contains(e.t, ids, id)
		got[id]++
	}
	assert.Len(e.t, got, len(ids), "flows per socket: %v", got)
}

// rowTables are the table configurations every row runs under: all of
// demuxtest.Configs, counting their paths, which
// TestKernelRow21Secondary reads.
var rowTables = func() []demuxtest.Config {
	cs := demuxtest.Configs()
	for i := range cs {
		cs[i].Table.CountPaths = true
	}
	return cs
}()

func TestKernelRows(t *testing.T) {
	require.Equal(t, rows.Count, rows.All[len(rows.All)-1].Num)
	for i, r := range rows.All {
		if i > 0 {
			require.LessOrEqual(t, rows.All[i-1].Num, r.Num, "rows out of order")
		}
		name := fmt.Sprintf("row%02d", r.Num)
		if r.Variant != "" {
			name += "/" + r.Variant
		}
		t.Run(name, func(t *testing.T) {
			if r.Note != "" {
				t.Logf("%s; depends on: %s", r.Name, r.Note)
			}
			for _, tc := range rowTables {
				t.Run(tc.Name, func(t *testing.T) {
					cfg := tc.Table
					cfg.Rand = rand.NewPCG(1, 2)
					tbl, err := demux.New[int](cfg)
					require.NoError(t, err)
					e := &rowEnv{t: t, s: &rowTableSUT{tbl: tbl}, table: tbl}
					e.run(r)
					require.NoError(t, e.table.Verify())
				})
			}
			t.Run("model", func(t *testing.T) {
				e := &rowEnv{t: t, s: rowModelSUT{model.New(model.Config{
					// A stand-in flow hash: the model has none.
					ReusePortIndex: func(src, dst netip.AddrPort, n int) int { return int(src.Port()) % n },
				})}}
				e.run(r)
			})
		})
	}
}

// TestKernelRow21Secondary runs row 21's point — a wildcard bind must see
// every socket on its port — with chains long enough that Hybrid's default
// threshold sends specific binds and lookups to the secondary table, and
// with variants where the one conflicting socket sits in a bucket that a
// secondary-table check of the new socket's own address would miss.
func TestKernelRow21Secondary(t *testing.T) {
	const n = 64
	cases := []struct {
		name  string
		setup func(e *rowEnv)
		bind  demux.Options
		want  syscall.Errno
	}{
		{"64 specific, then 0.0.0.0", func(e *rowEnv) {
			for i := 1; i <= n; i++ {
				e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i)))
			}
		}, rowOpts("0.0.0.0"), syscall.EADDRINUSE},
		{"64 specific, then :: dual-stack", func(e *rowEnv) {
			for i := 1; i <= n; i++ {
				e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i)))
			}
		}, rowOpts("::"), syscall.EADDRINUSE},
		{"64 specific, then :: V6Only", func(e *rowEnv) {
			for i := 1; i <= n; i++ {
				e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i)))
			}
		}, rowOpts("::", rowV6Only), 0},
		{"63 ReuseAddr and one without, then 0.0.0.0 ReuseAddr", func(e *rowEnv) {
			for i := 1; i <= n; i++ {
				if i == 37 {
					e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i)))
				} else {
					e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i), rowReuseAddr))
				}
			}
		}, rowOpts("0.0.0.0", rowReuseAddr), syscall.EADDRINUSE},
		{"0.0.0.0 on device 2 and 64 specific on device 1, then specific", func(e *rowEnv) {
			e.bind(rowOpts("0.0.0.0", rowDevice(2)))
			for i := 1; i <= n; i++ {
				e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i), rowDevice(1)))
			}
		}, rowOpts("127.0.0.200"), syscall.EADDRINUSE},
		{":: dual-stack on device 2 and 64 specific on device 1, then specific IPv4", func(e *rowEnv) {
			e.bind(rowOpts("::", rowDevice(2)))
			for i := 1; i <= n; i++ {
				e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i), rowDevice(1)))
			}
		}, rowOpts("127.0.0.200"), syscall.EADDRINUSE},
		{"64 specific, then v4-mapped of one of them", func(e *rowEnv) {
			for i := 1; i <= n; i++ {
				e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i)))
			}
		}, rowOpts("::ffff:127.0.0.50"), syscall.EADDRINUSE},
		{"64 specific, then a free specific address", func(e *rowEnv) {
			for i := 1; i <= n; i++ {
				e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i)))
			}
		}, rowOpts("127.0.0.200"), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range rowTables {
				t.Run(tc.Name, func(t *testing.T) {
					tbl, err := demux.New[int](tc.Table)
					require.NoError(t, err)
					e := &rowEnv{t: t, s: &rowTableSUT{tbl: tbl}, table: tbl}
					c.setup(e)
					before := tbl.Stats()
					e.bindErr(c.bind, c.want)
					require.NoError(t, tbl.Verify())
					if tc.Table.Slots != 0 && tc.Table.Strategy == demux.Hybrid && c.bind.Addr.Unmap().IsUnspecified() {
						// A wildcard bind must not trust the secondary
						// table alone.
						after := tbl.Stats()
						assert.Equal(t, before.BindChecks.Secondary, after.BindChecks.Secondary,
							"a wildcard bind check took the secondary path")
					}
				})
			}
			t.Run("model", func(t *testing.T) {
				e := &rowEnv{t: t, s: rowModelSUT{model.New(model.Config{})}}
				c.setup(e)
				e.bindErr(c.bind, c.want)
			})
		})
	}
	// Lookups on the long chain take the secondary path under Hybrid and
	// still find the exact socket, the wildcard one, and the tier order.
	tbl, err := demux.New[int](demux.Config{Slots: 4096, CountPaths: true})
	require.NoError(t, err)
	s := &rowTableSUT{tbl: tbl}
	e := &rowEnv{t: t, s: s, table: tbl}
	wild := e.bind(rowOpts("0.0.0.0", rowReuseAddr))
	for i := 1; i <= n; i++ {
		e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i), rowReuseAddr))
	}
	before := tbl.Stats()
	for i := 1; i <= n; i++ {
		e.delivers(rowPeerP, fmt.Sprintf("127.0.0.%d", i), i)
	}
	e.delivers(rowPeerP, "127.0.0.200", wild)
	after := tbl.Stats()
	assert.Greater(t, after.Lookups.Secondary, before.Lookups.Secondary, "Hybrid never took the secondary path")
}

// TestDeliberateDifferences checks the deliberate differences from
// Linux (numbered as in DESIGN.md and README), whose kernel answer depends
// on chain order or on the path: here the rule applies whatever the order
// and the strategy.
func TestDeliberateDifferences(t *testing.T) {
	owner1 := func(o *demux.Options) { o.Owner = 1 }
	cases := []struct {
		name string
		run  func(e *rowEnv)
	}{
		{"1: a compatible ReusePort socket does not excuse another conflict", func(e *rowEnv) {
			// Linux allows the bind if it meets the ReusePort socket first.
			e.bind(rowOpts("0.0.0.0", rowReuseAddr))
			e.bind(rowOpts("127.0.0.1", rowReuseAddr, rowReusePort))
			e.bindErr(rowOpts("127.0.0.1", rowReusePort), syscall.EADDRINUSE)
			e.reset()
			e.bind(rowOpts("127.0.0.1", rowReuseAddr, rowReusePort))
			e.bind(rowOpts("0.0.0.0", rowReuseAddr))
			e.bindErr(rowOpts("127.0.0.1", rowReusePort), syscall.EADDRINUSE)
		}},
		{"1: ReusePort of another owner conflicts", func(e *rowEnv) {
			e.bind(rowOpts("127.0.0.1", rowReusePort))
			e.bindErr(rowOpts("127.0.0.1", rowReusePort, owner1), syscall.EADDRINUSE)
		}},
		{"2: a higher score beats a ReusePort socket met first", func(e *rowEnv) {
			// Linux returns the ReusePort group if it comes first.
			e.bind(rowOpts("0.0.0.0", rowReuseAddr, rowReusePort))
			e.bind(rowOpts("0.0.0.0", rowReuseAddr, rowReusePort))
			d := e.bind(rowOpts("0.0.0.0", rowReuseAddr, rowDevice(rowLo)))
			e.delivers(rowPeerP, "127.0.0.1", d)
			e.reset()
			d = e.bind(rowOpts("0.0.0.0", rowReuseAddr, rowDevice(rowLo)))
			e.bind(rowOpts("0.0.0.0", rowReuseAddr, rowReusePort))
			e.bind(rowOpts("0.0.0.0", rowReuseAddr, rowReusePort))
			e.delivers(rowPeerP, "127.0.0.1", d)
		}},
		{"3: an IPv6 ReusePort socket wins ties as the newest", func(e *rowEnv) {
			// Linux appends IPv6 ReusePort sockets to the chain's end.
			e.bind(rowOpts("::1", rowReuseAddr))
			rp := e.bind(rowOpts("::1", rowReuseAddr, rowReusePort))
			e.delivers(rowPeer6, "::1", rp)
			e.reset()
			e.bind(rowOpts("::1", rowReuseAddr, rowReusePort))
			plain := e.bind(rowOpts("::1", rowReuseAddr))
			e.delivers(rowPeer6, "::1", plain)
		}},
		{"4: a bind to 127.0.0.6 sees the placeholder on a long port", func(e *rowEnv) {
			// Linux checks only the secondary chains of 127.0.0.6 and
			// 0.0.0.0 when the port has more than 10 sockets, and misses
			// the dual-stack socket, hashed under ::1, that holds it.
			for i := 20; i < 31; i++ {
				e.bind(rowOpts(fmt.Sprintf("127.0.0.%d", i), rowReuseAddr))
			}
			s := e.bind(rowOpts("::", rowReuseAddr))
			e.connect(s, rowPeer6, "::1")
			e.bindErr(rowOpts("127.0.0.6"), syscall.EADDRINUSE)
		}},
		{"1: a member of the group the bind joins does not excuse another conflict", func(e *rowEnv) {
			// Linux 6.18.44 stops at a socket the new one would share a
			// group with, and here meets it first.
			a := e.bind(rowOpts("127.0.0.1", rowReuseAddr, rowDevice(2)))
			e.bind(rowOpts("127.0.0.1", rowReusePort, rowDevice(3)))
			require.NoError(e.t, e.s.setDevice(a, 0))
			e.bindErr(rowOpts("127.0.0.1", rowReusePort, rowDevice(3)), syscall.EADDRINUSE)
		}},
		{"5: a socket that bind(0) gave its port keeps it on disconnect", func(e *rowEnv) {
			// Linux unbinds the port, and binds a new one at the next send.
			o := rowOpts("127.0.0.1")
			o.Port = 0
			s := e.bind(o)
			e.connect(s, rowPeerP, "")
			port := e.s.local(s).Port()
			require.NotZero(e.t, port)
			require.NoError(e.t, e.s.disconnect(s))
			assert.Equal(e.t, port, e.s.local(s).Port())
			got, ok := e.s.lookup(rowPeerQ, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), rowLo)
			assert.True(e.t, ok && got == s, "the disconnected socket receives at its port")
		}},
		{"6: a disconnected SO_REUSEPORT socket is in its group again", func(e *rowEnv) {
			// Linux leaves a socket that its connect detached out of every
			// group; flows then go to whichever socket a lookup meets first.
			a := e.bind(rowOpts("0.0.0.0", rowReusePort))
			b := e.bind(rowOpts("0.0.0.0", rowReusePort))
			e.connect(a, rowPeerP, "127.0.0.1")
			require.NoError(e.t, e.s.disconnect(a))
			e.flowsReach(rowPeerQ, "127.0.0.1", 64, a, b)
		}},
		{"6: SO_BINDTODEVICE moves a SO_REUSEPORT socket to the group of its device", func(e *rowEnv) {
			// Linux detaches it and leaves it in no group.
			a := e.bind(rowOpts("0.0.0.0", rowReusePort, rowDevice(rowLo)))
			b := e.bind(rowOpts("0.0.0.0", rowReusePort))
			require.NoError(e.t, e.s.setDevice(a, 0))
			e.flowsReach(rowPeerQ, "127.0.0.1", 64, a, b)
		}},
		{"7: a disconnected IPv6 socket forgets its peer", func(e *rowEnv) {
			// Linux keeps an IPv6 socket's peer address after a
			// disconnect, and its lookups filter on it.
			s := e.bind(rowOpts("::1"))
			e.connect(s, rowPeer6, "")
			require.NoError(e.t, e.s.disconnect(s))
			e.delivers(netip.MustParseAddrPort("[::2]:5000"), "::1", s)
			e.delivers(netip.MustParseAddrPort("[::1]:5001"), "::1", s)
		}},
		{"7: a disconnected dual-stack socket takes IPv6 after a v4-mapped peer", func(e *rowEnv) {
			// Linux keeps ::ffff:127.0.0.2 as its IPv6 peer, which no IPv6
			// datagram comes from.
			s := e.bind(rowOpts("::"))
			e.connect(s, netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.2"), 5000), "::ffff:127.0.0.1")
			require.NoError(e.t, e.s.disconnect(s))
			e.delivers(rowPeer6, "::1", s)
			e.delivers(rowPeerQ, "127.0.0.1", s)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range rowTables {
				t.Run(tc.Name, func(t *testing.T) {
					e := &rowEnv{t: t}
					e.fresh = func() rowSUT {
						tbl, err := demux.New[int](tc.Table)
						require.NoError(t, err)
						e.table = tbl
						return &rowTableSUT{tbl: tbl}
					}
					e.reset()
					c.run(e)
					require.NoError(t, e.table.Verify())
				})
			}
			t.Run("model", func(t *testing.T) {
				e := &rowEnv{t: t}
				e.fresh = func() rowSUT {
					return rowModelSUT{model.New(model.Config{
						ReusePortIndex: func(src, dst netip.AddrPort, n int) int { return int(src.Port()) % n },
					})}
				}
				e.reset()
				c.run(e)
			})
		})
	}
}
