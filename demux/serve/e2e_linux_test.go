package serve_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// The end-to-end test serves a table from kernel sockets on loopback,
// sends datagrams from real client sockets, and checks that each one
// reached exactly the socket that Table.Lookup picks for the same
// addressing (the handler answers with the socket's value) and that each
// reply came from the address the client sent to. Every read has a
// deadline and every case a fixed number of datagrams, so it cannot hang.

const readTimeout = 3 * time.Second

// hit is what the handler saw of one datagram.
type hit struct {
	val      string
	src, dst netip.AddrPort
	ifindex  int
	mcast    bool
}

// recorder is the handler: it records every delivery by payload and
// replies "value|payload".
type recorder struct {
	mu   sync.Mutex
	hits map[string][]hit
}

func newRecorder() *recorder { return &recorder{hits: map[string][]hit{}} }

func (rc *recorder) handle(r *serve.Request[string]) {
	p := string(r.Payload)
	rc.mu.Lock()
	rc.hits[p] = append(rc.hits[p], hit{r.Value, r.Src, r.Dst, r.Ifindex, r.Multicast})
	rc.mu.Unlock()
	r.Reply([]byte(r.Value + "|" + p))
}

func (rc *recorder) get(p string) []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.hits[p])
}

// e2e is one served table and its clients.
type e2e struct {
	t    *testing.T
	srv  *serve.Server[string]
	tbl  *demux.Table[string]
	rec  *recorder
	lo   int // loopback's interface index
	seq  int
	sent int
}

func newE2E(t *testing.T, cfg demux.Config, opts serve.Options) *e2e {
	lo, err := net.InterfaceByName("lo")
	require.NoError(t, err)
	rec := newRecorder()
	srv, err := serve.New[string](cfg, rec.handle, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	return &e2e{t: t, srv: srv, tbl: srv.Table(), rec: rec, lo: lo.Index}
}

// client opens a client socket on addr (port 0: any).
func (e *e2e) client(addr string) *net.UDPConn {
	ap := netip.AddrPortFrom(netip.MustParseAddr(addr), 0)
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *e2e) bind(o demux.Options, val string) *demux.Socket[string] {
	s, err := e.tbl.Bind(o, val)
	require.NoError(e.t, err, "bind %s", val)
	return s
}

// exchange sends one datagram from c to dst and checks its delivery and
// reply against the table's own answer; it returns the receiving value
// ("" if none).
func (e *e2e) exchange(c *net.UDPConn, dst netip.AddrPort) string {
	t := e.t
	e.seq++
	e.sent++
	payload := fmt.Sprintf("q%d", e.seq)
	src := c.LocalAddr().(*net.UDPAddr).AddrPort()
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	want, _ := e.tbl.Lookup(src, dst, e.lo)
	_, err := c.WriteToUDPAddrPort([]byte(payload), dst)
	require.NoError(t, err)
	if want == nil {
		return ""
	}
	buf := make([]byte, 512)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(readTimeout)))
	n, from, err := c.ReadFromUDPAddrPort(buf)
	require.NoError(t, err, "no reply to %s from %v to %v (want socket %q)", payload, src, dst, want.Value())
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	assert.Equal(t, dst, from, "reply to %s came from another address", payload)
	assert.Equal(t, want.Value()+"|"+payload, string(buf[:n]), "%v -> %v", src, dst)
	hs := e.rec.get(payload)
	if assert.Len(t, hs, 1, "deliveries of %s", payload) {
		assert.Equal(t, hit{want.Value(), src, dst, e.lo, false}, hs[0])
	}
	return want.Value()
}

// freePort binds a socket with port 0 in the table and returns its port,
// retrying when the kernel holds the port the table chose.
func (e *e2e) freePort(o demux.Options, val string) (*demux.Socket[string], uint16) {
	for range 10 {
		s, err := e.tbl.Bind(o, val)
		if errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		require.NoError(e.t, err)
		return s, s.LocalAddr().Port()
	}
	e.t.Fatal("no free port")
	return nil, 0
}

// e2eConfig is a table configuration and a server's options.
type e2eConfig struct {
	cfg  demux.Config
	opts serve.Options
}

func e2eConfigs() map[string]e2eConfig {
	return map[string]e2eConfig{
		"default":            {cfg: demux.Config{PortLow: 42000, PortHigh: 42999}},
		"256/twophase":       {cfg: demux.Config{Slots: 256, Strategy: demux.TwoPhase, PortLow: 43000, PortHigh: 43999}},
		"default/peraddress": {cfg: demux.Config{PortLow: 45000, PortHigh: 45999}, opts: serve.Options{PerAddress: true}},
	}
}

func TestEndToEnd(t *testing.T) {
	for name, c := range e2eConfigs() {
		t.Run(name, func(t *testing.T) {
			e := newE2E(t, c.cfg, c.opts)
			ip := netip.MustParseAddr
			// Port P: specific IPv4 sockets, a wildcard, an IPv6 one, a
			// connected one and an SO_REUSEPORT group.
			wild, p := e.freePort(demux.Options{Addr: ip("0.0.0.0"), ReuseAddr: true}, "wild4")
			ap := func(a string) netip.AddrPort { return netip.AddrPortFrom(ip(a), p) }
			spec2 := e.bind(demux.Options{Addr: ip("127.0.0.2"), Port: p, ReuseAddr: true}, "spec2")
			e.bind(demux.Options{Addr: ip("127.0.0.3"), Port: p, ReuseAddr: true}, "spec3")
			e.bind(demux.Options{Addr: ip("::1"), Port: p, ReuseAddr: true}, "spec6")
			peer := e.client("127.0.0.9")
			other := e.client("127.0.0.10")
			conn := e.bind(demux.Options{Addr: ip("0.0.0.0"), Port: p, ReuseAddr: true}, "connected")
			require.NoError(t, e.tbl.Connect(conn, peer.LocalAddr().(*net.UDPAddr).AddrPort(), ip("127.0.0.4")))
			for i := range 4 {
				e.bind(demux.Options{Addr: ip("127.0.0.6"), Port: p, ReusePort: true, ReuseAddr: true}, fmt.Sprint("group", i))
			}
			for _, c := range []struct {
				from *net.UDPConn
				to   string
				want string
			}{
				{other, "127.0.0.2", "spec2"},
				{other, "127.0.0.3", "spec3"},
				{other, "127.0.0.5", "wild4"},
				{other, "127.0.0.4", "wild4"},
				{peer, "127.0.0.4", "connected"},
				{peer, "127.0.0.2", "spec2"},
			} {
				assert.Equal(t, c.want, e.exchange(c.from, ap(c.to)), "to %s", c.to)
			}
			c6 := e.client("::1")
			assert.Equal(t, "spec6", e.exchange(c6, ap("::1")))

			// Every flow to the group reaches the member the table picks.
			members := map[string]bool{}
			for range 24 {
				c := e.client("127.0.0.11")
				for range 2 {
					members[e.exchange(c, ap("127.0.0.6"))] = true
				}
			}
			assert.GreaterOrEqual(t, len(members), 2, "flows spread over the group: %v", members)

			// Port Q: a dual-stack wildcard.
			_, q := e.freePort(demux.Options{Addr: ip("::")}, "dual")
			assert.Equal(t, "dual", e.exchange(other, netip.AddrPortFrom(ip("127.0.0.7"), q)))
			assert.Equal(t, "dual", e.exchange(c6, netip.AddrPortFrom(ip("::1"), q)))

			// bind(0) on a specific address, then an IPv6-only wildcard.
			s0, r := e.freePort(demux.Options{Addr: ip("127.0.0.8")}, "bind0")
			assert.Equal(t, "bind0", e.exchange(other, netip.AddrPortFrom(ip("127.0.0.8"), r)))
			e.bind(demux.Options{Addr: ip("::"), Port: r, V6Only: true}, "wild6")
			assert.Equal(t, "wild6", e.exchange(c6, netip.AddrPortFrom(ip("::1"), r)))

			// A close falls back to the wildcard. (Not asked with
			// PerAddress: 127.0.0.2's kernel socket stays open until its
			// reader's batch, which answered the last datagram to it,
			// ends, and a datagram it takes meanwhile is lost, as the
			// package documentation says; TestPerAddressFollowsBinds
			// asks once it closed.)
			require.NoError(t, e.tbl.Close(spec2))
			if !c.opts.PerAddress {
				assert.Equal(t, "wild4", e.exchange(other, ap("127.0.0.2")))
			}

			// Nothing receives: counted, not answered.
			before := e.srv.Stats()
			e.exchange(other, netip.AddrPortFrom(ip("127.0.0.9"), r))
			if c.opts.PerAddress {
				// No kernel socket of the server holds 127.0.0.9:r (port
				// r has 127.0.0.8's and the IPv6 wildcard's): the kernel
				// answers with a port unreachable itself, as Linux does,
				// and the server never reads it.
				e.sent--
			} else {
				waitFor(t, func() bool { return e.srv.Stats().Unmatched > before.Unmatched }, "the unmatched datagram is counted")
			}

			// Ports in use have kernel sockets; the last close of a port
			// closes them.
			assert.Equal(t, 3, e.srv.Stats().Ports)
			require.NoError(t, e.tbl.Close(s0))
			assert.Equal(t, 3, e.srv.Stats().Ports, "port r still has its IPv6 wildcard")
			for s := range e.tbl.Sockets() {
				if s.LocalAddr().Port() == r {
					require.NoError(t, e.tbl.Close(s))
				}
			}
			assert.Equal(t, 2, e.srv.Stats().Ports)
			_ = wild

			require.NoError(t, e.srv.Stop())
			st := e.srv.Stats()
			t.Logf("%d datagrams sent; stats %+v", e.sent, st)
			assert.Equal(t, uint64(e.sent), st.Received)
			assert.Equal(t, st.Received-st.Unmatched, st.Delivered)
			assert.Equal(t, st.Delivered, st.Replies)
			assert.Zero(t, st.ReplyErrors+st.ReadErrors+st.Truncated+st.KernelDrops)
		})
	}
}

func waitFor(t *testing.T, f func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(readTimeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestVetoWhenKernelPortBusy: a port another program holds cannot be
// served, so the bind fails and the table stays as it was.
func TestVetoWhenKernelPortBusy(t *testing.T) {
	busy, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	require.NoError(t, err)
	defer busy.Close()
	port := uint16(busy.LocalAddr().(*net.UDPAddr).Port)
	e := newE2E(t, demux.Config{}, serve.Options{})
	_, err = e.tbl.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.1"), Port: port}, "x")
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	assert.Zero(t, e.tbl.Len())
	assert.Zero(t, e.srv.Stats().Ports)
}

// TestStopLosesNoReadDatagram stops the server while a handler is busy
// with a batch: every datagram of that batch is still handled and
// answered.
func TestStopLosesNoReadDatagram(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 64)
	var mu sync.Mutex
	handled := 0
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		entered <- struct{}{}
		<-release
		mu.Lock()
		handled++
		mu.Unlock()
		r.Reply(r.Payload)
	}, serve.Options{})
	require.NoError(t, err)
	var port uint16
	for range 10 {
		s, err := srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.1")}, "s")
		if err == nil {
			port = s.LocalAddr().Port()
			break
		}
	}
	require.NotZero(t, port)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	const n = 8
	for i := range n {
		_, err := c.WriteToUDPAddrPort([]byte(fmt.Sprint(i)), dst)
		require.NoError(t, err)
	}
	select {
	case <-entered:
	case <-time.After(readTimeout):
		t.Fatal("no datagram reached the handler")
	}
	// The datagrams were sent before the first was handled, so on
	// loopback they are queued; some or all were read in this batch.
	stopped := make(chan error)
	go func() { stopped <- srv.Stop() }()
	time.Sleep(20 * time.Millisecond)
	close(release)
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(readTimeout):
		t.Fatal("Stop did not return")
	}
	st := srv.Stats()
	mu.Lock()
	defer mu.Unlock()
	assert.Positive(t, st.Received)
	assert.Equal(t, st.Received, uint64(handled), "every datagram read was handled")
	assert.Equal(t, st.Received, st.Replies, "and answered")
	got := 0
	buf := make([]byte, 64)
	for got < handled {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(readTimeout)))
		if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
			break
		}
		got++
	}
	assert.Equal(t, handled, got, "replies received")
}

// TestMulticastInNamespace sends multicast and broadcast datagrams in a
// fresh network namespace, one per case: every socket that
// LookupMulticast yields, and only those, gets it once, with
// Request.Multicast set, and answers from a unicast address. It needs
// root; in CI (which runs as root) it must run.
func TestMulticastInNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test must not skip there")
		}
		t.Skip("needs root for a network namespace")
	}
	for _, c := range []mcastCase{
		{
			name: "ipv4 group on lo", src: "127.0.0.1", dst: "239.1.2.3", ifname: "lo", join: true,
		},
		{
			name: "ipv4 subnet broadcast on veth", src: "10.77.0.1", dst: "10.77.0.255", ifname: "v0", broadcast: true,
		},
		{
			name: "ipv4 limited broadcast on veth", src: "10.77.0.1", dst: "255.255.255.255", ifname: "v0", broadcast: true,
		},
		{
			name: "ipv4 broadcast on lo", src: "127.0.0.1", dst: "127.255.255.255", ifname: "lo", broadcast: true,
		},
		{
			// A link-local group and source: both need the interface.
			name: "ipv6 link-local group on veth", src: "fe80::1%v0", dst: "ff02::114", ifname: "v0", join: true,
		},
	} {
		for _, per := range []bool{false, true} {
			name := c.name
			if per {
				// The kernel sockets of the group's or broadcast address
				// and of the wildcards each get a copy.
				name += "/peraddress"
			}
			t.Run(name, func(t *testing.T) { c.inNamespace(t, serve.Options{PerAddress: per}) })
		}
	}
}

// inNamespace runs c in a network namespace of its own.
func (c mcastCase) inNamespace(t *testing.T, opts serve.Options) {
	// The namespace is the thread's: the case's goroutine never
	// unlocks it, so the thread, and the namespace with it, end
	// when the case does, after its cleanups.
	runtime.LockOSThread()
	require.NoError(t, syscall.Unshare(syscall.CLONE_NEWNET), "unshare")
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "set", "lo", "multicast", "on"},
		{"route", "add", "224.0.0.0/4", "dev", "lo"},
		// v1 is up, so that v0 has a carrier. The copies sent out
		// of v0 reach v1 and die there (IPv4: their source is a
		// local address; IPv6: v1 has not joined the group); only
		// the copies looped back on v0 are delivered.
		{"link", "add", "v0", "type", "veth", "peer", "name", "v1"},
		{"addr", "add", "10.77.0.1/24", "dev", "v0"},
		{"addr", "add", "fe80::1/64", "dev", "v0", "nodad"},
		{"link", "set", "v1", "up"},
		{"link", "set", "v0", "up"},
	} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	// IPv6 adds v0's multicast route once v0 has a carrier, which
	// veth gives a moment after both ends are up; a send before
	// that fails with ENETUNREACH. (Polled on this goroutine: the
	// namespace is its thread's.)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out, err := exec.Command("ip", "-6", "route", "show", "table", "local", "dev", "v0").CombinedOutput()
		if err == nil && strings.Contains(string(out), "ff00::/8") {
			break
		}
		require.True(t, time.Now().Before(deadline), "v0 has no IPv6 multicast route after 5 s: %s", out)
	}
	selfDeliver(t, c.src)
	c.run(t, opts)
}

// selfDeliver waits until a socket on addr receives a datagram it sends
// to itself. Right after a link comes up, the kernel can lose the first
// datagram sent to a local address of that link, although the address
// and its local route are already listed: of 100 fresh namespaces set up
// as inNamespace does, 4 lost the first of four datagrams sent at once
// to fe80::1%v0 and none lost a later one; none lost any after a wait of
// half a second, or once one datagram had gone through. A reply lost that
// way would be the namespace's, not the server's.
func selfDeliver(t *testing.T, addr string) {
	ap := netip.AddrPortFrom(netip.MustParseAddr(addr), 0)
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	require.NoError(t, err)
	defer c.Close()
	self := c.LocalAddr().(*net.UDPAddr).AddrPort()
	buf := make([]byte, 8)
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, err := c.WriteToUDPAddrPort([]byte("probe"), self)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
		if _, _, err := c.ReadFromUDPAddrPort(buf); err == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "%s delivered no datagram to itself in 5 s", addr)
	}
}

// mcastCase is one multicast or broadcast datagram. Each case binds
// "wild" (the family's wildcard), "dst" (the destination address itself),
// "unicast" (the sender's address), "ondev" and "otherdev" (wildcards
// bound to the arrival interface and to another one), "dual" ([::], both
// families), "other" (the other family's wildcard) and "connected" (a
// wildcard connected to the sender); in every case the table's receivers
// are the same four.
type mcastCase struct {
	name      string
	src, dst  string // the sender's address and the destination
	ifname    string // the interface it leaves by and arrives on
	join      bool   // a group, which the adapter's kernel socket joins
	broadcast bool
}

func (c mcastCase) run(t *testing.T, opts serve.Options) {
	want := []string{"dst", "dual", "ondev", "wild"}
	e := newE2E(t, demux.Config{PortLow: 44000, PortHigh: 44999}, opts)
	ip := netip.MustParseAddr
	ifi, err := net.InterfaceByName(c.ifname)
	require.NoError(t, err)
	other := e.lo
	if other == ifi.Index {
		other = ifi.Index + 100
	}
	cl := e.client(c.src)
	src := cl.LocalAddr().(*net.UDPAddr).AddrPort()
	group := ip(c.dst)
	v4 := group.Is4()
	wild, otherWild := ip("0.0.0.0"), ip("::")
	if !v4 {
		wild, otherWild = otherWild, wild
	}
	_, p := e.freePort(demux.Options{Addr: wild, ReuseAddr: true, V6Only: !v4}, "wild")
	dst := netip.AddrPortFrom(group, p)
	bind := func(o demux.Options, val string) *demux.Socket[string] {
		o.Port, o.ReuseAddr = p, true
		return e.bind(o, val)
	}
	dstOpts := demux.Options{Addr: group}
	if group.IsLinkLocalMulticast() {
		dstOpts.Device = ifi.Index
	}
	bind(dstOpts, "dst")
	bind(demux.Options{Addr: src.Addr().WithZone(""), Device: dstOpts.Device}, "unicast")
	bind(demux.Options{Addr: wild, V6Only: !v4, Device: ifi.Index}, "ondev")
	bind(demux.Options{Addr: wild, V6Only: !v4, Device: other}, "otherdev")
	bind(demux.Options{Addr: ip("::")}, "dual")
	bind(demux.Options{Addr: otherWild, V6Only: v4}, "other")
	conn := bind(demux.Options{Addr: wild, V6Only: !v4}, "connected")
	// A connect sets the local address routing chose, the sender's own:
	// the socket no longer receives what is sent to the group.
	peer := src
	if peer.Addr().Zone() != "" {
		peer = netip.AddrPortFrom(peer.Addr().WithZone(strconv.Itoa(ifi.Index)), peer.Port())
	}
	require.NoError(t, e.tbl.Connect(conn, peer, peer.Addr()))
	if c.join {
		require.NoError(t, e.srv.JoinGroup(p, ifi.Index, group))
	}

	if v4 {
		pc := ipv4.NewPacketConn(cl)
		require.NoError(t, pc.SetMulticastInterface(ifi))
		require.NoError(t, pc.SetMulticastLoopback(true))
	} else {
		pc := ipv6.NewPacketConn(cl)
		require.NoError(t, pc.SetMulticastInterface(ifi))
		require.NoError(t, pc.SetMulticastLoopback(true))
	}
	if c.broadcast {
		allowBroadcast(t, cl)
	}
	var got []string
	e.tbl.LookupMulticast(src, dst, ifi.Index, func(s *demux.Socket[string], v string) bool {
		got = append(got, v)
		return true
	})
	slices.Sort(got)
	require.Equal(t, want, got, "the table's receivers")

	// The datagram is sent again, up to three times, only while the
	// server has read nothing: CI once saw the IPv6 link-local case's
	// datagram never reach the server's kernel socket (no reply within
	// 3 s), likely the first-datagram loss that selfDeliver now waits
	// out; a loss before the server is the namespace's, not the
	// server's. Once
	// the server has read it, deliveries and replies must be exact.
	for try := 0; ; try++ {
		_, err = cl.WriteToUDPAddrPort([]byte("m1"), dst)
		require.NoError(t, err)
		deadline := time.Now().Add(time.Second)
		for e.srv.Stats().Received == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if e.srv.Stats().Received != 0 {
			break
		}
		require.Less(t, try, 2, "the datagram never reached the server")
		t.Logf("the datagram did not reach the server within 1 s; sent again")
	}
	// The replies of a datagram are sent after all its deliveries, so
	// once they are in, every delivery is recorded.
	buf := make([]byte, 512)
	var replies, wantReplies []string
	for _, v := range want {
		wantReplies = append(wantReplies, v+"|m1")
		require.NoError(t, cl.SetReadDeadline(time.Now().Add(readTimeout)))
		n, from, err := cl.ReadFromUDPAddrPort(buf)
		require.NoError(t, err, "replies so far: %v; server %+v; deliveries %v", replies, e.srv.Stats(), e.rec.get("m1"))
		replies = append(replies, string(buf[:n]))
		assert.Equal(t, src.Addr().WithZone(""), from.Addr().WithZone("").Unmap(),
			"a reply to a multicast or broadcast datagram leaves from a unicast address")
	}
	var hits []string
	for _, h := range e.rec.get("m1") {
		hits = append(hits, h.val)
		assert.True(t, h.mcast, "Request.Multicast")
		assert.Equal(t, dst, h.dst)
		assert.Equal(t, ifi.Index, h.ifindex)
	}
	slices.Sort(hits)
	assert.Equal(t, want, hits, "deliveries")
	slices.Sort(replies)
	assert.Equal(t, wantReplies, replies)

	// Nothing more arrives: the datagram came in once, on one interface.
	require.NoError(t, cl.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, from, err := cl.ReadFromUDPAddrPort(buf)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "an extra reply from %v", from)
	require.NoError(t, e.srv.Stop())
	st := e.srv.Stats()
	assert.Equal(t, uint64(1), st.Received)
	assert.Equal(t, uint64(len(want)), st.Delivered)
	assert.Equal(t, uint64(len(want)), st.Replies)
	assert.Zero(t, st.Unmatched+st.UnmatchedMulticast+st.ReplyErrors+st.ReadErrors)
}
