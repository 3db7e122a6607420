package serve

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// keysOfPort returns the addresses of port's kernel sockets, in
// portListeners' order.
func keysOfPort[V any](s *Server[V], port uint16) []string {
	var out []string
	for _, l := range portListeners(s, port) {
		out = append(out, l.addr.String())
	}
	return out
}

// freeKernelPort returns a port that no socket of the host uses on
// 127.0.0.1 (the kernel's choice), for tests that need a port before the
// table binds it.
func freeKernelPort(t *testing.T) uint16 {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
}

// TestPerAddressSharesPort: with PerAddress, the server's kernel sockets
// take only the addresses its table's sockets use. Beside another socket
// of the host on 127.0.0.53 without SO_REUSEADDR (which makes every table
// bind on the port fail without PerAddress), the table binds 127.0.0.2
// and receives there, the other socket keeps its datagrams, and the binds
// that Linux would refuse (the same address, the wildcards) fail with
// EADDRINUSE and leave the table and the server as they were. A socket
// that binds another address of the port after the server does so too,
// and the address is the host's again once its last table socket closes.
func TestPerAddressSharesPort(t *testing.T) {
	got := make(chan string, 16)
	s, err := New[string](demux.Config{}, func(r *Request[string]) { got <- r.Value + " " + string(r.Payload) }, Options{PerAddress: true})
	require.NoError(t, err)
	defer s.Close()
	holder, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 53)})
	require.NoError(t, err)
	defer holder.Close()
	port := holder.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	tbl := s.Table()

	a, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), Port: port}, "a")
	require.NoError(t, err)
	for _, addr := range []string{"127.0.0.53", "0.0.0.0", "::"} {
		_, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr(addr), Port: port}, "refused")
		require.ErrorIs(t, err, syscall.EADDRINUSE, addr)
	}
	assert.Equal(t, 1, tbl.Len())
	assert.Equal(t, []string{"127.0.0.2"}, keysOfPort(s, port), "kernel sockets")
	assert.Equal(t, 1, s.Stats().Ports)

	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	send := func(dst string, p string) {
		_, err := c.WriteToUDPAddrPort([]byte(p), netip.AddrPortFrom(netip.MustParseAddr(dst), port))
		require.NoError(t, err)
	}
	send("127.0.0.2", "to-a")
	send("127.0.0.53", "to-holder")
	select {
	case g := <-got:
		assert.Equal(t, "a to-a", g)
	case <-time.After(5 * time.Second):
		t.Fatal("the table socket received nothing")
	}
	buf := make([]byte, 64)
	require.NoError(t, holder.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, err := holder.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "to-holder", string(buf[:n]))

	// Binds after the server's: another address works, the table's does
	// not.
	later, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 54), Port: int(port)})
	require.NoError(t, err, "another address of the port, after the server")
	later.Close()
	_, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: int(port)})
	require.ErrorIs(t, err, syscall.EADDRINUSE, "the table's address")

	require.NoError(t, a.Close())
	assert.Empty(t, keysOfPort(s, port), "kernel sockets after the close")
	// The kernel socket closes once its reader, which may still be ending
	// the batch that delivered "to-a", has read its queue dry.
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.draining) == 0
	}, 5*time.Second, time.Millisecond, "127.0.0.2's kernel socket closes")
	again, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: int(port)})
	require.NoError(t, err, "the address is free once its table sockets closed")
	again.Close()
	select {
	case g := <-got:
		t.Fatalf("unexpected delivery %q", g)
	default:
	}
}

// TestPerAddressFollowsBinds: the kernel sockets follow the addresses of
// the table's sockets, one per address however many table sockets share
// it, both families for a dual-stack "::", the IPv4 address of a
// v4-mapped one; each closes with the last table socket of its address.
// A reply leaves from the address that the datagram was sent to, and a
// Conn's datagrams from its socket's address.
func TestPerAddressFollowsBinds(t *testing.T) {
	s, err := New[string](demux.Config{}, func(r *Request[string]) {
		_ = r.Reply([]byte(r.Value))
	}, Options{PerAddress: true})
	require.NoError(t, err)
	defer s.Close()
	tbl := s.Table()
	port := freeKernelPort(t)
	bind := func(addr string, val string) *demux.Socket[string] {
		sk, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr(addr), Port: port, ReuseAddr: true}, val)
		require.NoError(t, err, addr)
		return sk
	}
	a1, a2 := bind("127.0.0.2", "a1"), bind("127.0.0.2", "a2")
	m := bind("::ffff:127.0.0.3", "m")
	assert.Equal(t, []string{"127.0.0.2", "127.0.0.3"}, keysOfPort(s, port))

	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	ask := func(dst string) (string, netip.AddrPort) {
		t.Helper()
		_, err := c.WriteToUDPAddrPort([]byte("q"), netip.AddrPortFrom(netip.MustParseAddr(dst), port))
		require.NoError(t, err)
		buf := make([]byte, 64)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		require.NoError(t, err, "reply from %s", dst)
		return string(buf[:n]), from
	}
	v, from := ask("127.0.0.3")
	assert.Equal(t, "m", v)
	assert.Equal(t, "127.0.0.3", from.Addr().String(), "reply's source")

	require.NoError(t, a2.Close())
	assert.Equal(t, []string{"127.0.0.2", "127.0.0.3"}, keysOfPort(s, port), "a1 still uses 127.0.0.2")
	v, from = ask("127.0.0.2")
	assert.Equal(t, "a1", v)
	assert.Equal(t, "127.0.0.2", from.Addr().String(), "reply's source")
	require.NoError(t, a1.Close())
	assert.Equal(t, []string{"127.0.0.3"}, keysOfPort(s, port))

	w := bind("::", "w")
	assert.Equal(t, []string{"0.0.0.0", "127.0.0.3", "::"}, keysOfPort(s, port), "a dual-stack wildcard opens both families'")
	v, from = ask("127.0.0.4")
	assert.Equal(t, "w", v)
	assert.Equal(t, "127.0.0.4", from.Addr().String(), "reply's source")
	// Once 127.0.0.2's kernel socket has closed (it stays open while its
	// reader ends the batch that answered a1's last datagram), the
	// wildcard's takes what is sent to that address.
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.draining) == 0
	}, 5*time.Second, time.Millisecond, "127.0.0.2's kernel socket closes")
	v, from = ask("127.0.0.2")
	assert.Equal(t, "w", v, "after the close of 127.0.0.2's last socket")
	assert.Equal(t, "127.0.0.2", from.Addr().String(), "reply's source")

	// A Conn on a specific address sends from it.
	conn, err := s.ListenPacket(demux.Options{Addr: netip.MustParseAddr("127.0.0.5"), Port: port, ReuseAddr: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"0.0.0.0", "127.0.0.3", "127.0.0.5", "::"}, keysOfPort(s, port))
	_, err = conn.WriteTo([]byte("from-conn"), c.LocalAddr())
	require.NoError(t, err)
	buf := make([]byte, 64)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, from, err := c.ReadFromUDPAddrPort(buf)
	require.NoError(t, err)
	assert.Equal(t, "from-conn", string(buf[:n]))
	assert.Equal(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.5"), port), from)

	require.NoError(t, conn.Close())
	require.NoError(t, w.Close())
	assert.Equal(t, []string{"127.0.0.3"}, keysOfPort(s, port))
	// Opening the wildcard set SO_REUSEADDR on 127.0.0.3's kernel socket
	// for the while: it was cleared again, so that no other socket binds
	// the table's address, not even one with the option (asked once the
	// wildcard, which would refuse it anyway, is closed).
	for _, addr := range []string{"127.0.0.3"} {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			})
		}}
		_, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(netip.MustParseAddr(addr), port).String())
		require.ErrorIs(t, err, syscall.EADDRINUSE, "a socket with SO_REUSEADDR on %s", addr)
	}
	require.NoError(t, m.Close())
	assert.Empty(t, keysOfPort(s, port))
	assert.Zero(t, s.Stats().Ports)
	assert.Zero(t, s.Stats().ReplyErrors)
}

// TestPerAddressBroadcastOnce: the kernel gives a broadcast datagram to
// the kernel socket of each address it matches: the wildcard's and the
// broadcast address's. Each table socket must still receive it once: a
// kernel socket delivers it only to the table sockets of its own address.
func TestPerAddressBroadcastOnce(t *testing.T) {
	const sent = 10
	got := make(chan string, 4*sent)
	s, err := New[string](demux.Config{}, func(r *Request[string]) { got <- r.Value }, Options{PerAddress: true, IPv4Only: true})
	require.NoError(t, err)
	defer s.Close()
	port := freeKernelPort(t)
	for _, b := range []struct{ addr, val string }{{"0.0.0.0", "wild"}, {"127.255.255.255", "bcast"}} {
		_, err := s.Table().Bind(demux.Options{Addr: netip.MustParseAddr(b.addr), Port: port, ReuseAddr: true}, b.val)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"0.0.0.0", "127.255.255.255"}, keysOfPort(s, port))
	c := broadcaster(t)
	for range sent {
		_, err := c.WriteToUDPAddrPort([]byte("b"), netip.AddrPortFrom(netip.MustParseAddr("127.255.255.255"), port))
		require.NoError(t, err)
	}
	// Both kernel sockets read their copies, and each delivers each to
	// one table socket: done when both counted their deliveries.
	require.Eventually(t, func() bool {
		ls := portListeners(s, port)
		return len(ls) == 2 && ls[0].c[nDelivered].Load() >= sent && ls[1].c[nDelivered].Load() >= sent
	}, 10*time.Second, time.Millisecond, "both kernel sockets delivered every broadcast")
	count := map[string]int{}
	deadline := time.After(200 * time.Millisecond) // deliveries after the reads
	for done := false; !done; {
		select {
		case v := <-got:
			count[v]++
		case <-deadline:
			done = true
		}
	}
	assert.Equal(t, map[string]int{"wild": sent, "bcast": sent}, count)
	st := s.Stats()
	assert.Zero(t, st.UnmatchedMulticast)
	assert.Equal(t, uint64(sent), st.Received, "each broadcast counted once")
	assert.Equal(t, uint64(2*sent), st.Delivered)
}

// TestPerAddressHookPanic: a caller's OnAddr that panics after the server
// opened the address's kernel socket leaves none behind, and the next
// bind of the address works; one that vetoes leaves none either.
func TestPerAddressHookPanic(t *testing.T) {
	boom, veto := errors.New("boom"), errors.New("veto")
	var mode string
	s, err := New[string](demux.Config{OnAddr: func(_ netip.AddrPort, _, bound bool) error {
		switch {
		case bound && mode == "panic":
			panic(boom)
		case bound && mode == "veto":
			return veto
		}
		return nil
	}}, func(*Request[string]) {}, Options{PerAddress: true})
	require.NoError(t, err)
	defer s.Close()
	port := freeKernelPort(t)
	o := demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), Port: port}
	for _, mode = range []string{"panic", "veto"} {
		r := func() (r any) {
			defer func() { r = recover() }()
			_, err := s.Table().Bind(o, mode)
			if mode == "veto" {
				assert.ErrorIs(t, err, veto)
			}
			return nil
		}()
		if mode == "panic" {
			assert.Equal(t, boom, r)
		}
		assert.Empty(t, keysOfPort(s, port), mode)
		k, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: int(port)})
		require.NoError(t, err, "%s: the address is free on the host", mode)
		k.Close()
	}
	mode = ""
	sk, err := s.Table().Bind(o, "ok")
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.2"}, keysOfPort(s, port))
	require.NoError(t, sk.Close())
	assert.Empty(t, keysOfPort(s, port))
}

// TestPerAddressCloseDrainsQueue: when an address's last table socket
// closes while its kernel socket's reader is in a batch, that kernel
// socket stays open until the batch ends; a datagram sent to the address
// meanwhile waits in its queue. The reader reads the queue dry before it
// closes the socket, so that the table's wildcard socket receives the
// datagram, as on Linux, instead of its being lost with the socket.
func TestPerAddressCloseDrainsQueue(t *testing.T) {
	closed, proceed := make(chan struct{}), make(chan struct{})
	stop := make(chan struct{}) // frees a waiting handler when the test fails
	late := make(chan string, 1)
	var a *demux.Socket[string]
	s, err := New[string](demux.Config{}, func(r *Request[string]) {
		switch r.Value {
		case "a":
			_ = r.Socket.Close() // the last table socket on 127.0.0.2
			close(closed)
			select {
			case <-proceed:
			case <-stop:
			}
		case "w":
			late <- string(r.Payload)
		}
	}, Options{PerAddress: true})
	require.NoError(t, err)
	defer s.Close()
	defer close(stop) // before Close, which waits for the handlers
	port := freeKernelPort(t)
	for _, b := range []struct{ addr, val string }{{"0.0.0.0", "w"}, {"127.0.0.2", "a"}} {
		sk, err := s.Table().Bind(demux.Options{Addr: netip.MustParseAddr(b.addr), Port: port, ReuseAddr: true}, b.val)
		require.NoError(t, err)
		if b.val == "a" {
			a = sk
		}
	}
	var la *listener[string]
	for _, l := range portListeners(s, port) {
		if l.addr == netip.MustParseAddr("127.0.0.2") {
			la = l
		}
	}
	require.NotNil(t, la)
	// The handler waits for the test: no look may hand its call off,
	// which would give the socket a new reader.
	la.registered.Store(true)

	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)
	_, err = c.WriteToUDPAddrPort([]byte("first"), dst)
	require.NoError(t, err)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("a's handler did not run")
	}
	require.True(t, a.Closed())
	_, err = c.WriteToUDPAddrPort([]byte("late"), dst)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return queued(t, la) > 0 }, 5*time.Second, time.Millisecond,
		"the late datagram waits in 127.0.0.2's kernel socket")
	close(proceed)
	select {
	case p := <-late:
		assert.Equal(t, "late", p)
	case <-time.After(5 * time.Second):
		t.Fatal("the datagram sent after the close was lost")
	}
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.draining) == 0
	}, 5*time.Second, time.Millisecond, "127.0.0.2's kernel socket closes")
	assert.True(t, la.closing.Load(), "127.0.0.2's kernel socket closed")
	assert.Equal(t, []string{"0.0.0.0"}, keysOfPort(s, port))
}

// TestPerAddressRebindWhileDraining: a bind of an address whose kernel
// socket is being read dry before its close (TestPerAddressCloseDrainsQueue)
// takes that socket back, as it takes back one that waits for its
// batch's end: a second kernel socket on the address would fail with
// EADDRINUSE beside it. The new table socket then receives there.
func TestPerAddressRebindWhileDraining(t *testing.T) {
	closed, proceed := make(chan struct{}), make(chan struct{})
	inLate, proceedLate := make(chan struct{}), make(chan struct{})
	stop := make(chan struct{}) // frees a waiting handler when the test fails
	got := make(chan string, 4)
	s, err := New[string](demux.Config{}, func(r *Request[string]) {
		switch {
		case r.Value == "a":
			_ = r.Socket.Close()
			close(closed)
			select {
			case <-proceed:
			case <-stop:
			}
		case string(r.Payload) == "late":
			// The reader drains: hold it in the batch of the late
			// datagram, with its socket set to close.
			close(inLate)
			select {
			case <-proceedLate:
			case <-stop:
			}
		default:
			got <- r.Value + " " + string(r.Payload)
		}
	}, Options{PerAddress: true})
	require.NoError(t, err)
	defer s.Close()
	defer close(stop) // before Close, which waits for the handlers
	port := freeKernelPort(t)
	bind := func(addr, val string) {
		_, err := s.Table().Bind(demux.Options{Addr: netip.MustParseAddr(addr), Port: port, ReuseAddr: true}, val)
		require.NoError(t, err, val)
	}
	bind("0.0.0.0", "w")
	bind("127.0.0.2", "a")
	var la *listener[string]
	for _, l := range portListeners(s, port) {
		if l.addr == netip.MustParseAddr("127.0.0.2") {
			la = l
		}
	}
	require.NotNil(t, la)
	la.registered.Store(true) // no hand-off: the handlers wait for the test
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)
	send := func(p string) {
		_, err := c.WriteToUDPAddrPort([]byte(p), dst)
		require.NoError(t, err)
	}
	wait := func(ch chan struct{}, what string) {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal(what)
		}
	}
	send("first")
	wait(closed, "a's handler did not run")
	send("late")
	require.Eventually(t, func() bool { return queued(t, la) > 0 }, 5*time.Second, time.Millisecond)
	close(proceed)
	wait(inLate, "the late datagram was not read")
	require.True(t, la.draining.Load(), "127.0.0.2's kernel socket is set to drain")

	bind("127.0.0.2", "a2")
	close(proceedLate)
	send("again")
	select {
	case g := <-got:
		assert.Equal(t, "a2 again", g)
	case <-time.After(5 * time.Second):
		t.Fatal("the new socket on 127.0.0.2 received nothing")
	}
	assert.False(t, la.closing.Load(), "the kernel socket was taken back, not closed")
	assert.Equal(t, []string{"0.0.0.0", "127.0.0.2"}, keysOfPort(s, port))
}

// TestPerAddressWithReaders: with PerAddress and Readers 2, each address
// in use gets an SO_REUSEPORT group of two kernel sockets, each with its
// reader; every datagram reaches the table socket it was sent to, and
// the groups close with their addresses.
func TestPerAddressWithReaders(t *testing.T) {
	const clients, each = 16, 5
	got := make(chan string, 2*clients*each)
	s, err := New[string](demux.Config{}, func(r *Request[string]) { got <- r.Value + " " + string(r.Payload) }, Options{PerAddress: true, Readers: 2})
	require.NoError(t, err)
	defer s.Close()
	port := freeKernelPort(t)
	var socks []*demux.Socket[string]
	for _, a := range []string{"127.0.0.2", "127.0.0.3"} {
		sk, err := s.Table().Bind(demux.Options{Addr: netip.MustParseAddr(a), Port: port}, a)
		require.NoError(t, err)
		socks = append(socks, sk)
	}
	assert.Equal(t, []string{"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"}, keysOfPort(s, port))
	ls := portListeners(s, port)
	assert.False(t, ls[0].more.Load())
	assert.True(t, ls[1].more.Load())

	want := map[string]int{}
	for range clients {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		require.NoError(t, err)
		defer c.Close()
		for _, a := range []string{"127.0.0.2", "127.0.0.3"} {
			for range each {
				_, err := c.WriteToUDPAddrPort([]byte("to "+a), netip.AddrPortFrom(netip.MustParseAddr(a), port))
				require.NoError(t, err)
				want[a+" to "+a]++
			}
		}
	}
	count := map[string]int{}
	for range 2 * clients * each {
		select {
		case g := <-got:
			count[g]++
		case <-time.After(5 * time.Second):
			t.Fatalf("received %v of %v", count, want)
		}
	}
	assert.Equal(t, want, count)
	readers := 0
	for _, l := range ls {
		if l.c[nReceived].Load() > 0 {
			readers++
		}
	}
	t.Logf("%d of the 4 kernel sockets received datagrams", readers)
	assert.GreaterOrEqual(t, readers, 3, "the flows of each address spread over its two kernel sockets")
	for _, sk := range socks {
		require.NoError(t, sk.Close())
	}
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.draining) == 0 && len(s.groups) == 0
	}, 5*time.Second, time.Millisecond)
	for _, l := range ls {
		assert.True(t, l.closing.Load())
	}
}
