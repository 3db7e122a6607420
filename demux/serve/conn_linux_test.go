package serve_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/ipv4"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// The Conn tests run a server on loopback and talk to its Conns from
// kernel client sockets. Every read has a deadline, so none can hang.

// connServer is a server whose handler records what reaches it.
type connServer struct {
	srv     *serve.Server[string]
	mu      sync.Mutex
	handled []string // "value|payload"
}

func newConnServer(t *testing.T) *connServer {
	cs := &connServer{}
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		cs.mu.Lock()
		cs.handled = append(cs.handled, r.Value+"|"+string(r.Payload))
		cs.mu.Unlock()
		r.Reply([]byte(r.Value))
	}, serve.Options{})
	require.NoError(t, err)
	cs.srv = srv
	t.Cleanup(func() { _ = srv.Close() })
	return cs
}

// listen makes a Conn on addr, on a port free in the kernel too (the
// table's bind(0) may pick one that another program holds).
func (cs *connServer) listen(t *testing.T, addr string, port uint16) *serve.Conn {
	for range 20 {
		c, err := cs.srv.ListenPacket(demux.Options{Addr: netip.MustParseAddr(addr), Port: port, ReuseAddr: true})
		if errors.Is(err, syscall.EADDRINUSE) && port == 0 {
			continue
		}
		require.NoError(t, err)
		return c
	}
	t.Fatal("no free port")
	return nil
}

func portOf(c net.PacketConn) uint16 { return c.LocalAddr().(*net.UDPAddr).AddrPort().Port() }

func client(t *testing.T, addr string) *net.UDPConn {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(addr), 0)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// allowBroadcast lets c send to a broadcast address (SO_BROADCAST).
func allowBroadcast(t *testing.T, c *net.UDPConn) {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
	}))
	require.NoError(t, serr)
}

// ask sends q from cl to dst and returns the answer and where it came
// from.
func ask(t *testing.T, cl *net.UDPConn, dst netip.AddrPort, q string) (string, netip.AddrPort) {
	t.Helper()
	_, err := cl.WriteToUDPAddrPort([]byte(q), dst)
	require.NoError(t, err)
	require.NoError(t, cl.SetReadDeadline(time.Now().Add(3*time.Second)))
	buf := make([]byte, 2048)
	n, from, err := cl.ReadFromUDPAddrPort(buf)
	require.NoError(t, err, "no answer to %q at %v", q, dst)
	return string(buf[:n]), netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
}

// echo answers every datagram c reads with "echo:" and the payload,
// through WriteTo, until c closes; it returns the error that ended it.
func echo(c net.PacketConn) <-chan error {
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				done <- err
				return
			}
			if _, err := c.WriteTo(append([]byte("echo:"), buf[:n]...), from); err != nil {
				done <- err
				return
			}
		}
	}()
	return done
}

func hasIPv6Loopback(t *testing.T) bool {
	c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI has IPv6 loopback; this test must not skip there: %v", err)
		}
		return false
	}
	_ = c.Close()
	return true
}

// TestConnReplySource: a Conn's replies through WriteTo leave from the
// address the client wrote to, on sockets bound to a specific address and
// to a wildcard, IPv4, IPv6 and dual-stack.
func TestConnReplySource(t *testing.T) {
	v6 := hasIPv6Loopback(t)
	for _, tc := range []struct {
		bind, client string
		to           []string
		needs6       bool
	}{
		{"127.0.0.2", "127.0.0.9", []string{"127.0.0.2"}, false},
		{"0.0.0.0", "127.0.0.9", []string{"127.0.0.3", "127.0.0.4", "127.0.0.1"}, false},
		{"::1", "::1", []string{"::1"}, true},
		{"::", "127.0.0.9", []string{"127.0.0.3", "127.0.0.5"}, true},
		{"::", "::1", []string{"::1"}, true},
	} {
		t.Run(tc.bind+"<-"+tc.client, func(t *testing.T) {
			if tc.needs6 && !v6 {
				t.Skip("no IPv6 loopback")
			}
			cs := newConnServer(t)
			c := cs.listen(t, tc.bind, 0)
			done := echo(c)
			cl := client(t, tc.client)
			for i, to := range tc.to {
				dst := netip.AddrPortFrom(netip.MustParseAddr(to), portOf(c))
				q := fmt.Sprint("q", i)
				a, from := ask(t, cl, dst, q)
				assert.Equal(t, "echo:"+q, a)
				assert.Equal(t, dst, from, "the reply's source")
			}
			require.NoError(t, c.Close())
			assert.ErrorIs(t, <-done, net.ErrClosed)
			assert.Empty(t, cs.handled)
		})
	}
}

// TestConnDeadline: a deadline wakes a read that is blocked when it
// passes, and one set in the past or to now wakes it at once; the error
// is os.ErrDeadlineExceeded, a net.Error that times out; clearing the
// deadline makes reads wait for datagrams again.
func TestConnDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func() time.Time
	}{
		{"past", func() time.Time { return time.Unix(1, 0) }},
		{"now", time.Now},
		{"soon", func() time.Time { return time.Now().Add(50 * time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newConnServer(t)
			c := cs.listen(t, "127.0.0.2", 0)
			errc := make(chan error, 1)
			go func() {
				_, _, err := c.ReadFrom(make([]byte, 10))
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond) // let the read block
			require.NoError(t, c.SetReadDeadline(tc.at()))
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
				var ne net.Error
				require.ErrorAs(t, err, &ne)
				assert.True(t, ne.Timeout())
			case <-time.After(3 * time.Second):
				t.Fatal("the deadline did not wake the blocked read")
			}
			_, _, err := c.ReadFrom(make([]byte, 10))
			assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "a read after the deadline")

			require.NoError(t, c.SetReadDeadline(time.Time{}))
			cl := client(t, "127.0.0.9")
			_, err = cl.WriteToUDPAddrPort([]byte("x"), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), portOf(c)))
			require.NoError(t, err)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(3*time.Second)))
			n, _, err := c.ReadFrom(make([]byte, 10))
			require.NoError(t, err)
			assert.Equal(t, 1, n)
		})
	}
	t.Run("queued", func(t *testing.T) {
		// As on a kernel socket, a passed deadline fails a read even with
		// a datagram queued; clearing it reads the datagram.
		cs := newConnServer(t)
		c := cs.listen(t, "127.0.0.2", 0)
		cl := client(t, "127.0.0.9")
		_, err := cl.WriteToUDPAddrPort([]byte("x"), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), portOf(c)))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return cs.srv.Stats().Delivered == 1 }, 3*time.Second, time.Millisecond)
		require.NoError(t, c.SetReadDeadline(time.Now()))
		_, _, err = c.ReadFrom(make([]byte, 10))
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.NoError(t, c.SetReadDeadline(time.Time{}))
		n, _, err := c.ReadFrom(make([]byte, 10))
		require.NoError(t, err)
		assert.Equal(t, 1, n)
	})
	t.Run("write", func(t *testing.T) {
		cs := newConnServer(t)
		c := cs.listen(t, "127.0.0.2", 0)
		require.NoError(t, c.SetWriteDeadline(time.Now()))
		_, err := c.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 9})
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	})
}

// TestConnClose: reads blocked in a Conn end with net.ErrClosed however
// the Conn's socket goes away: Conn.Close, closing the socket through the
// table or its handle, stopping or closing the server. Later reads and
// writes fail the same way.
func TestConnClose(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(cs *connServer, c *serve.Conn, sk *demux.Socket[string]) error
	}{
		{"Conn.Close", func(_ *connServer, c *serve.Conn, _ *demux.Socket[string]) error { return c.Close() }},
		{"Table.Close", func(cs *connServer, _ *serve.Conn, sk *demux.Socket[string]) error { return cs.srv.Table().Close(sk) }},
		{"Socket.Close", func(_ *connServer, _ *serve.Conn, sk *demux.Socket[string]) error { return sk.Close() }},
		{"Server.Stop", func(cs *connServer, _ *serve.Conn, _ *demux.Socket[string]) error { return cs.srv.Stop() }},
		{"Server.Close", func(cs *connServer, _ *serve.Conn, _ *demux.Socket[string]) error { return cs.srv.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newConnServer(t)
			var sk *demux.Socket[string]
			var err error
			for sk == nil {
				sk, err = cs.srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2")}, "s")
				if !errors.Is(err, syscall.EADDRINUSE) {
					require.NoError(t, err)
				}
			}
			// Another socket keeps the port in use, so that only the
			// watcher can tell the Conn that its socket closed.
			_, err = cs.srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.3"), Port: sk.LocalAddr().Port()}, "other")
			require.NoError(t, err)
			c, err := cs.srv.SocketConn(sk)
			require.NoError(t, err)
			const readers = 3
			errc := make(chan error, readers)
			for range readers {
				go func() {
					_, _, err := c.ReadFrom(make([]byte, 10))
					errc <- err
				}()
			}
			time.Sleep(20 * time.Millisecond)
			require.NoError(t, tc.close(cs, c, sk))
			for range readers {
				select {
				case err := <-errc:
					assert.ErrorIs(t, err, net.ErrClosed)
				case <-time.After(3 * time.Second):
					t.Fatal("a blocked read did not end")
				}
			}
			_, _, err = c.ReadFrom(make([]byte, 10))
			assert.ErrorIs(t, err, net.ErrClosed)
			_, err = c.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 9})
			assert.ErrorIs(t, err, net.ErrClosed)
			assert.ErrorIs(t, c.SetReadDeadline(time.Now()), net.ErrClosed)
		})
	}
}

// TestConnDelivery: on one port, Conns and handler sockets on several
// addresses, an SO_REUSEPORT group of Conns among them; every datagram
// reaches exactly the socket that Table.Lookup picks, Conn or handler,
// and no other.
func TestConnDelivery(t *testing.T) {
	cs := newConnServer(t)
	tbl := cs.srv.Table()
	first := cs.listen(t, "127.0.0.2", 0)
	port := portOf(first)
	conns := map[*serve.Conn]string{first: "c2"}
	sockOf := map[string]string{} // table socket's address → its name
	add := func(addr, name string, reusePort bool) {
		o := demux.Options{Addr: netip.MustParseAddr(addr), Port: port, ReuseAddr: true, ReusePort: reusePort}
		sk, err := tbl.Bind(o, name)
		require.NoError(t, err)
		c, err := cs.srv.SocketConn(sk)
		require.NoError(t, err)
		conns[c] = name
	}
	add("127.0.0.3", "g-a", true)
	add("127.0.0.3", "g-b", true)
	add("0.0.0.0", "wild", false)
	_, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.4"), Port: port, ReuseAddr: true}, "h4")
	require.NoError(t, err)
	// Every Conn's socket value is its name, except first's (ListenPacket
	// binds with the zero value).
	for sk := range tbl.Sockets() {
		sockOf[sk.Options().Addr.String()+"/"+sk.Value()] = sk.Value()
	}

	var mu sync.Mutex
	got := map[string][]string{} // payload → receivers
	var wg sync.WaitGroup
	for c, name := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for {
				n, _, err := c.ReadFrom(buf)
				if err != nil {
					return
				}
				mu.Lock()
				got[string(buf[:n])] = append(got[string(buf[:n])], name)
				mu.Unlock()
			}
		}()
	}
	lo, err := net.InterfaceByName("lo")
	require.NoError(t, err)
	want := map[string]string{}
	var clients []*net.UDPConn
	for i := range 8 {
		clients = append(clients, client(t, fmt.Sprintf("127.0.1.%d", i+1)))
	}
	to := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	for i := range 200 {
		cl := clients[i%len(clients)]
		dst := netip.AddrPortFrom(netip.MustParseAddr(to[i%len(to)]), port)
		src := cl.LocalAddr().(*net.UDPAddr).AddrPort()
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		sk, v := tbl.Lookup(src, dst, lo.Index)
		require.NotNil(t, sk)
		if v == "" {
			v = "c2"
		}
		p := fmt.Sprint("d", i)
		want[p] = v
		_, err := cl.WriteToUDPAddrPort([]byte(p), dst)
		require.NoError(t, err)
		if i%16 == 15 {
			time.Sleep(time.Millisecond) // no kernel drops
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return len(got)+len(cs.handled) >= len(want)
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, cs.srv.Stop())
	wg.Wait()
	handled := map[string]bool{}
	for _, h := range cs.handled {
		handled[h] = true
	}
	names := map[string]int{}
	for p, w := range want {
		if w == "h4" {
			assert.True(t, handled["h4|"+p], "%s: not handled", p)
			assert.Empty(t, got[p], "%s went to a Conn", p)
		} else {
			assert.Equal(t, []string{w}, got[p], "%s", p)
		}
		names[w]++
	}
	assert.Len(t, cs.handled, names["h4"], "the handler got only its socket's datagrams")
	assert.Equal(t, uint64(0), cs.srv.Stats().KernelDrops)
	t.Logf("receivers: %v", names)
}

// TestConnReadMsg: ReadMsgUDP gives the destination, interface and ECN
// bits in the kernel's control message format, and WriteMsgUDP sends
// from the source and with the ECN bits its control messages name.
func TestConnReadMsg(t *testing.T) {
	cs := newConnServer(t)
	c := cs.listen(t, "0.0.0.0", 0)
	port := portOf(c)
	cl := client(t, "127.0.0.9")
	require.NoError(t, ipv4.NewConn(cl).SetTOS(0x2)) // ECT(0)
	require.NoError(t, setRecvTOS(cl))
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.7"), port)
	_, err := cl.WriteToUDPAddrPort([]byte("hello"), dst)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(3*time.Second)))
	b, oob := make([]byte, 3), make([]byte, 128)
	n, oobn, flags, from, err := c.ReadMsgUDP(b, oob)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.NotZero(t, flags&syscall.MSG_TRUNC, "truncated")
	assert.Equal(t, cl.LocalAddr().(*net.UDPAddr).AddrPort(), from.AddrPort())
	var cm ipv4.ControlMessage
	require.NoError(t, cm.Parse(oob[:oobn]))
	lo, err := net.InterfaceByName("lo")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.7", cm.Dst.String())
	assert.Equal(t, lo.Index, cm.IfIndex)
	tos, ok := findTOS(t, oob[:oobn])
	require.True(t, ok, "IP_TOS")
	assert.Equal(t, byte(0x2), tos&3)

	// Too little room: MSG_CTRUNC.
	_, err = cl.WriteToUDPAddrPort([]byte("again"), dst)
	require.NoError(t, err)
	_, _, flags, _, err = c.ReadMsgUDP(b, make([]byte, 8))
	require.NoError(t, err)
	assert.NotZero(t, flags&syscall.MSG_CTRUNC)

	// A reply from 127.0.0.8, marked ECT(1).
	out := (&ipv4.ControlMessage{Src: net.IPv4(127, 0, 0, 8)}).Marshal()
	out = append(out, tosMsg(0x1)...)
	_, _, err = c.WriteMsgUDP([]byte("reply"), out, cl.LocalAddr().(*net.UDPAddr))
	require.NoError(t, err)
	require.NoError(t, cl.SetReadDeadline(time.Now().Add(3*time.Second)))
	coob := make([]byte, 128)
	n, coobn, _, src, err := cl.ReadMsgUDPAddrPort(make([]byte, 64), coob)
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	assert.Equal(t, "127.0.0.8", src.Addr().Unmap().String())
	tos, ok = findTOS(t, coob[:coobn])
	require.True(t, ok, "IP_TOS at the client")
	assert.Equal(t, byte(0x1), tos&3)

	// Control messages a Conn cannot honour are refused.
	bad := tosMsg(0x1)
	*(*int32)(unsafePointer(&bad[12])) = 999 // an unknown type
	_, _, err = c.WriteMsgUDP([]byte("x"), bad, cl.LocalAddr().(*net.UDPAddr))
	assert.ErrorIs(t, err, syscall.EINVAL)
	assert.Empty(t, cs.handled)
}

// TestConnReadBuffer: SetReadBuffer bounds the queue; datagrams beyond it
// are dropped and counted, and the rest are read in order.
func TestConnReadBuffer(t *testing.T) {
	cs := newConnServer(t)
	c := cs.listen(t, "127.0.0.2", 0)
	require.NoError(t, c.SetReadBuffer(4*2048)) // four datagrams of the default MaxDatagram
	assert.ErrorIs(t, c.SetReadBuffer(-1), syscall.EINVAL)
	cl := client(t, "127.0.0.9")
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), portOf(c))
	for i := range 10 {
		_, err := cl.WriteToUDPAddrPort([]byte{byte(i)}, dst)
		require.NoError(t, err)
	}
	// Delivered, not Received: a datagram is received when read, and
	// counted delivered after its push to the Conn, full queue or not.
	require.Eventually(t, func() bool { return cs.srv.Stats().Delivered >= 10 }, 3*time.Second, time.Millisecond)
	assert.Equal(t, uint64(6), c.Drops())
	assert.Equal(t, uint64(6), cs.srv.Stats().ConnDrops)
	for i := range 4 {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
		b := make([]byte, 4)
		n, _, err := c.ReadFrom(b)
		require.NoError(t, err)
		assert.Equal(t, []byte{byte(i)}, b[:n])
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, _, err := c.ReadFrom(make([]byte, 4))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

// TestConnBadInput: errors, not panics, for what a Conn cannot do.
func TestConnBadInput(t *testing.T) {
	cs := newConnServer(t)
	c := cs.listen(t, "127.0.0.2", 0)
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 9}
	for name, err := range map[string]error{
		"not a UDPAddr": func() error { _, err := c.WriteTo(nil, &net.TCPAddr{}); return err }(),
		"nil UDPAddr":   func() error { _, err := c.WriteToUDP(nil, nil); return err }(),
		"nil net.Addr":  func() error { _, err := c.WriteTo(nil, nil); return err }(),
		"typed nil":     func() error { _, err := c.WriteTo(nil, (*net.UDPAddr)(nil)); return err }(),
		"nil msg addr":  func() error { _, _, err := c.WriteMsgUDP(nil, nil, nil); return err }(),
		"port 0":        func() error { _, err := c.WriteTo(nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)}); return err }(),
		"short cmsg":    func() error { _, _, err := c.WriteMsgUDP(nil, []byte{1, 2, 3}, to); return err }(),
	} {
		assert.ErrorIs(t, err, syscall.EINVAL, name)
	}
	_, err := c.WriteToUDPAddrPort(nil, netip.MustParseAddrPort("[::1]:9"))
	assert.ErrorIs(t, err, syscall.EAFNOSUPPORT, "IPv6 peer of an IPv4 socket")
	_, err = cs.srv.SocketConn(nil)
	assert.ErrorIs(t, err, syscall.EINVAL)
	sk, err := cs.srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.3"), Port: portOf(c)}, "x")
	require.NoError(t, err)
	_, err = cs.srv.SocketConn(sk)
	require.NoError(t, err)
	_, err = cs.srv.SocketConn(sk)
	assert.ErrorIs(t, err, syscall.EEXIST, "a second Conn")
	other := newConnServer(t)
	osk, err := other.srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.4"), Port: portOf(c)}, "y")
	if err == nil {
		_, err = cs.srv.SocketConn(osk)
		assert.ErrorIs(t, err, syscall.EBADF, "a socket of another table")
	}
	require.NoError(t, c.Close())
	assert.ErrorIs(t, c.Close(), net.ErrClosed, "a second Close")
}

// TestConnOversizedWrite: a write longer than the family's largest UDP
// payload fails with EMSGSIZE every time, as on a kernel socket, and the
// largest one goes out. Repeated, the long write to one peer is a run
// that the Conn would otherwise queue, reporting success for a datagram
// the kernel then refuses.
func TestConnOversizedWrite(t *testing.T) {
	for _, tc := range []struct {
		local, peer string
		max         int
	}{
		{"127.0.0.2", "127.0.0.9:9", 65535 - 20 - 8},
		{"::1", "[::1]:9", 65535 - 8},
	} {
		t.Run(tc.local, func(t *testing.T) {
			cs := newConnServer(t)
			c := cs.listen(t, tc.local, 0)
			to := netip.MustParseAddrPort(tc.peer)
			for i := range 3 {
				n, err := c.WriteToUDPAddrPort(make([]byte, tc.max+1), to)
				assert.ErrorIs(t, err, syscall.EMSGSIZE, "write %d", i)
				assert.Zero(t, n, "write %d", i)
			}
			n, err := c.WriteToUDPAddrPort(make([]byte, tc.max), to)
			require.NoError(t, err)
			assert.Equal(t, tc.max, n)
			require.NoError(t, c.Close())
		})
	}
}

// TestConnAllocs counts the allocations of a datagram's way from the
// kernel to a Conn's reader and back: none with the AddrPort methods, and
// one with ReadFrom, the *net.UDPAddr (with its IP) that the
// net.PacketConn contract returns. The server's reader allocates nothing
// per datagram: its buffers come from a pool that the Conn's reads refill.
func TestConnAllocs(t *testing.T) {
	cs := newConnServer(t)
	c := cs.listen(t, "127.0.0.2", 0)
	cl := client(t, "127.0.0.9")
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), portOf(c))
	payload, buf, cbuf := []byte("ping"), make([]byte, 64), make([]byte, 64)
	round := func(read func() (netip.AddrPort, error)) {
		if _, err := cl.WriteToUDPAddrPort(payload, dst); err != nil {
			panic(err)
		}
		from, err := read()
		if err != nil {
			panic(err)
		}
		if _, err := c.WriteToUDPAddrPort(payload, from); err != nil {
			panic(err)
		}
		if _, _, err := cl.ReadFromUDPAddrPort(cbuf); err != nil {
			panic(err)
		}
	}
	addrPort := func() (netip.AddrPort, error) {
		_, from, err := c.ReadFromUDPAddrPort(buf)
		return from, err
	}
	readFrom := func() (netip.AddrPort, error) {
		_, from, err := c.ReadFrom(buf)
		if err != nil {
			return netip.AddrPort{}, err
		}
		return from.(*net.UDPAddr).AddrPort(), nil
	}
	for range 100 { // fill the buffer pool
		round(addrPort)
	}
	a := testing.AllocsPerRun(500, func() { round(addrPort) })
	assert.Zero(t, a, "allocations per datagram, AddrPort methods")
	a = testing.AllocsPerRun(500, func() { round(readFrom) })
	assert.Equal(t, 1.0, a, "allocations per datagram, ReadFrom")
}

// TestListenPacketAttach: while datagrams stream to an address, Conns come
// and go on it through ListenPacket. A datagram that the table gives a
// new Conn's socket goes to the Conn even in the moment between the bind
// and the Conn's registration; the handler never sees such a socket
// (ListenPacket binds with the zero value, "").
func TestListenPacketAttach(t *testing.T) {
	var mu sync.Mutex
	var leaked int
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		if r.Value == "" {
			mu.Lock()
			leaked++
			mu.Unlock()
		}
	}, serve.Options{})
	require.NoError(t, err)
	defer srv.Close()
	var wild *demux.Socket[string]
	for wild == nil {
		wild, err = srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("0.0.0.0"), ReuseAddr: true}, "wild")
		if !errors.Is(err, syscall.EADDRINUSE) {
			require.NoError(t, err)
		}
	}
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), wild.LocalAddr().Port())
	cl := client(t, "127.0.0.9")
	stop := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			default:
			}
			_, _ = cl.WriteToUDPAddrPort([]byte("x"), dst)
			n++
		}
	}()
	// Hold open the moments between bind and registration, and between
	// close and forgetting, which are otherwise too short to hit often.
	serve.SetTestPause(func() { time.Sleep(200 * time.Microsecond) })
	defer serve.SetTestPause(nil)
	deadline := time.Now().Add(2 * time.Second)
	rounds := 0
	for ; rounds < 300 && time.Now().Before(deadline); rounds++ {
		c, err := srv.ListenPacket(demux.Options{Addr: dst.Addr(), Port: dst.Port(), ReuseAddr: true})
		require.NoError(t, err)
		time.Sleep(100 * time.Microsecond)
		require.NoError(t, c.Close())
	}
	close(stop)
	t.Logf("%d rounds, %d datagrams", rounds, <-sent)
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, leaked, "datagrams for a Conn's socket reached the handler")
}

// TestConnReadBatch: ReadBatch waits for one datagram and takes those
// queued behind it, each with its payload spread over its buffers, its
// control messages and its sender, in order; a short buffer truncates.
func TestConnReadBatch(t *testing.T) {
	cs := newConnServer(t)
	c := cs.listen(t, "127.0.0.2", 0)
	cl := client(t, "127.0.0.9")
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), portOf(c))
	for _, p := range []string{"one", "two", "three!"} {
		_, err := cl.WriteToUDPAddrPort([]byte(p), dst)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return cs.srv.Stats().Delivered == 3 }, 3*time.Second, time.Millisecond)
	ms := make([]ipv4.Message, 4)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 2), make([]byte, 3)}
		ms[i].OOB = make([]byte, 128)
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(3*time.Second)))
	n, err := c.ReadBatch(ms, 0)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for i, want := range []string{"one", "two", "three"} {
		m := ms[i]
		assert.Equal(t, want, string(append(m.Buffers[0][:min(m.N, 2)], m.Buffers[1][:max(m.N-2, 0)]...)))
		assert.Equal(t, cl.LocalAddr().(*net.UDPAddr).AddrPort(), m.Addr.(*net.UDPAddr).AddrPort())
		var cm ipv4.ControlMessage
		require.NoError(t, cm.Parse(m.OOB[:m.NN]))
		assert.Equal(t, "127.0.0.2", cm.Dst.String())
		assert.Equal(t, i == 2, m.Flags&syscall.MSG_TRUNC != 0, "truncated %d", i)
	}
	_, err = c.ReadBatch(ms, syscall.MSG_DONTWAIT)
	assert.ErrorIs(t, err, syscall.EOPNOTSUPP)
	require.NoError(t, c.SetReadDeadline(time.Now()))
	_, err = c.ReadBatch(ms, 0)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

// TestSteerByPayload: the server hands each datagram's payload to the
// table's lookup, so that a group's selector steers by it: here the first
// byte names the member, whatever the sender's address.
func TestSteerByPayload(t *testing.T) {
	cs := newConnServer(t)
	first := cs.listen(t, "127.0.0.2", 0)
	require.NoError(t, first.Close())
	port := portOf(first)
	tbl := cs.srv.Table()
	var members []*serve.Conn
	var g demux.Group[string]
	for _, name := range []string{"m0", "m1"} {
		sk, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), Port: port, ReusePort: true}, name)
		require.NoError(t, err)
		g, _ = sk.Group()
		c, err := cs.srv.SocketConn(sk)
		require.NoError(t, err)
		members = append(members, c)
	}
	g.SetSelector(func(d demux.Datagram, _ uint32, m demux.Members[string]) int {
		if len(d.Payload) == 0 {
			return -1
		}
		return int(d.Payload[0]) % m.Len()
	})
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)
	for i := range 20 {
		cl := client(t, fmt.Sprintf("127.0.2.%d", i+1))
		_, err := cl.WriteToUDPAddrPort([]byte{byte(i % 2), byte(i)}, dst)
		require.NoError(t, err)
	}
	for w, c := range members {
		for range 10 {
			require.NoError(t, c.SetReadDeadline(time.Now().Add(3*time.Second)))
			b := make([]byte, 8)
			n, _, err := c.ReadFrom(b)
			require.NoError(t, err, "member %d", w)
			require.Equal(t, 2, n)
			assert.Equal(t, byte(w), b[0], "datagram %d reached member %d", b[1], w)
		}
	}
}
