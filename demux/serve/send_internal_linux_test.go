package serve

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSenderGroups: the writer's sends of a queue of datagrams to two
// peers, of several sizes, with and without a source address, arrive
// whole and in order at the peer each was written to, in fewer messages
// than datagrams when the kernel segments (UDP GSO): runs split where
// the peer, the control messages or the size changes, and after a
// shorter datagram.
func TestSenderGroups(t *testing.T) {
	k, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	require.NoError(t, err)
	defer k.Close()
	var peers [2]*net.UDPConn
	for i := range peers {
		peers[i], err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
		require.NoError(t, err)
		defer peers[i].Close()
		require.NoError(t, peers[i].SetReadBuffer(4<<20))
	}
	addr := func(i int) netip.AddrPort { return peers[i].LocalAddr().(*net.UDPAddr).AddrPort() }
	var src sendControl
	src.src = netip.MustParseAddr("127.0.0.3")
	srcOOB, _ := src.marshal(nil, true)

	type dg struct {
		peer, size int
		oob        []byte
	}
	var want []dg
	run := func(peer, size, count int, oob []byte) {
		for range count {
			want = append(want, dg{peer, size, oob})
		}
	}
	run(1, 1400, 50, nil) // more bytes than one segmented send takes
	run(0, 100, 70, nil)  // more datagrams than one segmented send takes
	cut := len(want)
	run(0, 1200, 5, nil)    // one message
	run(1, 1200, 3, nil)    // another peer
	run(1, 1000, 1, nil)    // shorter: ends the run
	run(1, 1200, 4, nil)    // a larger one starts a new run
	run(1, 1200, 2, srcOOB) // other control messages
	run(0, 1200, 2, nil)
	run(0, 1300, 1, nil) // larger than the run's, so a run of its own
	run(0, 0, 1, nil)    // empty, alone
	run(0, 1300, 2, nil)
	run(1, 500, 2, nil)
	run(0, 500, 2, nil) // alternating peers
	run(1, 500, 1, nil)

	// Through a queue of the writer's, in two goes, the second across
	// the ring's end.
	var q sendQueue
	s := newSender(&Conn{k4: k})
	head := 0
	for _, part := range [][]dg{want[:cut], want[cut:]} {
		for i, d := range part {
			e := &q.ents[(head+i)%sendSlots]
			e.buf = bytes.Repeat([]byte{byte(head + i)}, d.size)
			e.to, e.k = addr(d.peer), k
			e.oobn = copy(e.oob[:], d.oob)
		}
		require.NoError(t, s.send(&q, head, len(part)))
		head = (head + len(part)) % sendSlots
	}
	if s.gso {
		// 1400s (46, then 4); 100s (64, then 6); 1200s to peer 0;
		// 1200s and a 1000 to peer 1; 1200s; with a source; 1200s;
		// 1300; empty; 1300s; 500s to 1, 0, 1.
		assert.Equal(t, 2+2+1+1+1+1+1+1+1+1+1+1+1, s.msgs, "messages")
	} else {
		t.Log("the kernel does not segment: one message per datagram")
		assert.Equal(t, len(want), s.msgs)
	}
	buf := make([]byte, 2048)
	for p := range peers {
		for i, d := range want {
			if d.peer != p {
				continue
			}
			require.NoError(t, peers[p].SetReadDeadline(time.Now().Add(2*time.Second)))
			n, from, err := peers[p].ReadFromUDPAddrPort(buf)
			require.NoError(t, err, "peer %d, datagram %d", p, i)
			require.Equal(t, d.size, n, "peer %d, datagram %d", p, i)
			require.Equal(t, bytes.Repeat([]byte{byte(i)}, d.size), buf[:n], "peer %d, datagram %d", p, i)
			wantFrom := "127.0.0.2"
			if d.oob != nil {
				wantFrom = "127.0.0.3"
			}
			require.Equal(t, wantFrom, from.Addr().String(), fmt.Sprintf("peer %d, datagram %d", p, i))
		}
		require.NoError(t, peers[p].SetReadDeadline(time.Now().Add(20*time.Millisecond)))
		_, _, err := peers[p].ReadFromUDPAddrPort(buf)
		require.Error(t, err, "peer %d: more datagrams than written", p)
	}
}

// fakeSocket is a table socket for a Conn made without a server.
type fakeSocket struct{ addr netip.AddrPort }

func (f fakeSocket) localAddr() netip.AddrPort { return f.addr }
func (fakeSocket) device() int                 { return 0 }
func (fakeSocket) closed() bool                { return false }
func (fakeSocket) release(*Conn) error         { return nil }

// TestConnQueuedSendError: a queued datagram that fails (here: its
// kernel socket closed under the Conn) fails the next write, once, as a
// socket's pending error does; the write after it is queued again.
func TestConnQueuedSendError(t *testing.T) {
	k, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	require.NoError(t, err)
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
	require.NoError(t, err)
	defer peer.Close()
	to := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	c := newConn(fakeSocket{k.LocalAddr().(*net.UDPAddr).AddrPort()}, false, false, false, k, nil, new(sync.Pool), new(atomic.Uint64))
	_, err = c.WriteToUDPAddrPort([]byte("x"), to)
	require.NoError(t, err)
	require.NoError(t, peer.SetReadDeadline(time.Now().Add(2*time.Second)))
	_, _, err = peer.ReadFromUDPAddrPort(make([]byte, 8))
	require.NoError(t, err, "the first datagram")
	require.NoError(t, k.Close())
	_, err = c.WriteToUDPAddrPort([]byte("y"), to) // queued; its send fails
	require.NoError(t, err)
	var got error
	require.Eventually(t, func() bool {
		c.drain()
		_, got = c.WriteToUDPAddrPort([]byte("z"), to)
		return got != nil
	}, 2*time.Second, time.Millisecond)
	assert.ErrorIs(t, got, net.ErrClosed)
	_, err = c.WriteToUDPAddrPort([]byte("w"), to)
	assert.NoError(t, err, "the error is reported once; this datagram is queued")
	assert.NoError(t, c.Close())
}

// TestConnWriteBackpressure: a write to a full queue waits, as a write to
// a full socket buffer does, until the write deadline passes, room
// frees, or the Conn closes.
func TestConnWriteBackpressure(t *testing.T) {
	k, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	require.NoError(t, err)
	defer k.Close()
	to := netip.MustParseAddrPort("127.0.0.9:9")
	c := newConn(fakeSocket{k.LocalAddr().(*net.UDPAddr).AddrPort()}, false, false, false, k, nil, new(sync.Pool), new(atomic.Uint64))
	fill := func() {
		c.sq.mu.Lock()
		c.sq.n = sendSlots // as if the writer were slow to send them
		c.sq.mu.Unlock()
	}
	free := func() {
		c.sq.mu.Lock()
		c.sq.n = 0
		close(c.sq.space)
		c.sq.space = nil
		c.sq.mu.Unlock()
	}
	fill()
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(50*time.Millisecond)))
	start := time.Now()
	_, err = c.WriteToUDPAddrPort([]byte("x"), to)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "the write waited")
	require.NoError(t, c.SetWriteDeadline(time.Time{}))

	done := make(chan error, 1)
	go func() { _, err := c.WriteToUDPAddrPort([]byte("x"), to); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("a write to a full queue returned: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	free()
	require.NoError(t, <-done, "room freed")

	require.Eventually(t, func() bool { // the writer sent it and waits
		c.sq.mu.Lock()
		defer c.sq.mu.Unlock()
		return c.sq.idle
	}, 2*time.Second, time.Millisecond)
	fill()
	go func() { _, err := c.WriteToUDPAddrPort([]byte("x"), to); done <- err }()
	time.Sleep(20 * time.Millisecond)
	c.shut()
	assert.ErrorIs(t, <-done, net.ErrClosed)
}

// TestConnWriteInline: a lone write is sent by its caller, and the
// writer starts only for a run (the same length to the same peer twice
// in a row); every datagram arrives, in order.
func TestConnWriteInline(t *testing.T) {
	k, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	require.NoError(t, err)
	defer k.Close()
	var peers [2]*net.UDPConn
	for i := range peers {
		peers[i], err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
		require.NoError(t, err)
		defer peers[i].Close()
	}
	addr := func(i int) netip.AddrPort { return peers[i].LocalAddr().(*net.UDPAddr).AddrPort() }
	c := newConn(fakeSocket{k.LocalAddr().(*net.UDPAddr).AddrPort()}, false, false, false, k, nil, new(sync.Pool), new(atomic.Uint64))
	defer c.Close()
	started := func() bool {
		c.sq.mu.Lock()
		defer c.sq.mu.Unlock()
		return c.sq.started
	}
	writes := []struct {
		peer    int
		payload string
	}{{0, "a"}, {1, "b"}, {0, "cc"}, {1, "dd"}, {0, "eee"}}
	for _, w := range writes {
		_, err := c.WriteToUDPAddrPort([]byte(w.payload), addr(w.peer))
		require.NoError(t, err)
	}
	assert.False(t, started(), "no run: the writer did not start")
	_, err = c.WriteToUDPAddrPort([]byte("fff"), addr(0))
	require.NoError(t, err)
	assert.True(t, started(), "a run: the writer started")
	buf := make([]byte, 8)
	for p, want := range [][]string{{"a", "cc", "eee", "fff"}, {"b", "dd"}} {
		for _, w := range want {
			require.NoError(t, peers[p].SetReadDeadline(time.Now().Add(2*time.Second)))
			n, _, err := peers[p].ReadFromUDPAddrPort(buf)
			require.NoError(t, err)
			assert.Equal(t, w, string(buf[:n]))
		}
	}
}
