package serve_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/ipv4"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// slowBound is what a slow handler on one socket may add to the reply of
// another socket on its port: the documented hand-off delay (a call
// found running on two looks of the server's monitor, 1 ms apart: at most
// 2 ms), with room for a loaded test machine's scheduling.
const slowBound = 25 * time.Millisecond

// TestSlowHandlerKeepsToItsSocket: while a handler on one socket takes
// 300 ms, another socket on the same port is answered within slowBound,
// whether its datagram came in the slow one's batch or later; the slow
// socket's own datagrams wait, and are handled one at a time, in order,
// and answered in order.
func TestSlowHandlerKeepsToItsSocket(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sameBatch bool // the fast datagram is read with the slow one
	}{
		{"later batch", false},
		{"same batch", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const slow = 300 * time.Millisecond
			var inSlow, maxInSlow atomic.Int32
			var mu sync.Mutex
			var order []string // the slow socket's payloads, as handled
			started := make(chan struct{}, 16)
			srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
				if r.Value == "slow" {
					n := inSlow.Add(1)
					if n > maxInSlow.Load() {
						maxInSlow.Store(n)
					}
					mu.Lock()
					order = append(order, string(r.Payload))
					first := len(order) == 1
					mu.Unlock()
					if first {
						started <- struct{}{}
						time.Sleep(slow)
					}
					inSlow.Add(-1)
				}
				_ = r.Reply(r.Payload)
			}, serve.Options{IPv4Only: true})
			require.NoError(t, err)
			defer srv.Close()
			s := boundPort(t, srv, "127.0.0.2", "slow")
			port := s.LocalAddr().Port()
			_, err = srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.3"), Port: port}, "fast")
			require.NoError(t, err)
			slowDst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)
			fastDst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), port)
			sc, fc := client(t, "127.0.0.1"), client(t, "127.0.0.1")
			// Warm up: the fast socket answers.
			got, _ := ask(t, fc, fastDst, "warm")
			require.Equal(t, "warm", got)

			t0 := time.Now()
			first := sc // the client of s0
			if tc.sameBatch {
				// One sendmmsg: both are queued before the reader wakes.
				first = fc
				ms := []ipv4.Message{
					{Buffers: [][]byte{[]byte("s0")}, Addr: net.UDPAddrFromAddrPort(slowDst)},
					{Buffers: [][]byte{[]byte("f0")}, Addr: net.UDPAddrFromAddrPort(fastDst)},
				}
				k, err := ipv4.NewPacketConn(fc).WriteBatch(ms, 0)
				require.NoError(t, err)
				require.Equal(t, 2, k)
			} else {
				_, err = sc.WriteToUDPAddrPort([]byte("s0"), slowDst)
				require.NoError(t, err)
			}
			<-started
			// More for the slow socket, while its first call runs.
			for i := 1; i <= 4; i++ {
				_, err = sc.WriteToUDPAddrPort([]byte(fmt.Sprint("s", i)), slowDst)
				require.NoError(t, err)
			}
			if !tc.sameBatch {
				t0 = time.Now()
				_, err = fc.WriteToUDPAddrPort([]byte("f0"), fastDst)
				require.NoError(t, err)
			}
			buf := make([]byte, 64)
			require.NoError(t, fc.SetReadDeadline(time.Now().Add(readTimeout)))
			n, _, err := fc.ReadFromUDPAddrPort(buf)
			took := time.Since(t0)
			require.NoError(t, err)
			assert.Equal(t, "f0", string(buf[:n]))
			t.Logf("the other socket's reply took %v while a handler took %v", took, slow)
			assert.Less(t, took, slowBound, "the other socket's reply")
			// Later datagrams for the fast socket are not held up either.
			for i := 1; i <= 3; i++ {
				t1 := time.Now()
				got, _ := ask(t, fc, fastDst, fmt.Sprint("f", i))
				assert.Equal(t, fmt.Sprint("f", i), got)
				assert.Less(t, time.Since(t1), slowBound)
			}
			// The slow socket's datagrams: in order, one at a time.
			require.NoError(t, first.SetReadDeadline(time.Now().Add(readTimeout)))
			n, _, err = first.ReadFromUDPAddrPort(buf)
			require.NoError(t, err)
			assert.Equal(t, "s0", string(buf[:n]))
			require.NoError(t, sc.SetReadDeadline(time.Now().Add(readTimeout)))
			for i := 1; i < 5; i++ {
				n, _, err := sc.ReadFromUDPAddrPort(buf)
				require.NoError(t, err)
				assert.Equal(t, fmt.Sprint("s", i), string(buf[:n]), "replies of the slow socket, in order")
			}
			mu.Lock()
			assert.Equal(t, []string{"s0", "s1", "s2", "s3", "s4"}, order)
			mu.Unlock()
			assert.Equal(t, int32(1), maxInSlow.Load(), "calls for one socket at a time")
			waitFor(t, func() bool { st := srv.Stats(); return st.Replies == st.Delivered }, "replies counted")
			assert.Zero(t, srv.Stats().ReplyErrors)
		})
	}
}

// TestHandOffsAreBounded: datagrams to many sockets whose handlers are
// slow make at most 32 calls of a kernel socket's run at once (each holds
// a goroutine and a reader's buffers); every datagram is still handled
// and answered.
func TestHandOffsAreBounded(t *testing.T) {
	const sockets, limit = 48, 32 + 1 // the reader's own call, and 32 handed off
	var in, most atomic.Int32
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		n := in.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(100 * time.Millisecond)
		in.Add(-1)
		_ = r.Reply(r.Payload)
	}, serve.Options{IPv4Only: true})
	require.NoError(t, err)
	defer srv.Close()
	first := boundPort(t, srv, "127.0.1.0", "s0")
	port := first.LocalAddr().Port()
	dsts := []netip.AddrPort{first.LocalAddr()}
	for i := 1; i < sockets; i++ {
		a := netip.AddrFrom4([4]byte{127, 0, 1, byte(i)})
		_, err := srv.Table().Bind(demux.Options{Addr: a, Port: port}, fmt.Sprint("s", i))
		require.NoError(t, err)
		dsts = append(dsts, netip.AddrPortFrom(a, port))
	}
	c := client(t, "127.0.0.1")
	for _, d := range dsts {
		_, err := c.WriteToUDPAddrPort([]byte(d.String()), d)
		require.NoError(t, err)
	}
	buf := make([]byte, 64)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(2*readTimeout)))
	for range sockets {
		_, _, err := c.ReadFromUDPAddrPort(buf)
		require.NoError(t, err)
	}
	t.Logf("at most %d calls at once", most.Load())
	assert.LessOrEqual(t, most.Load(), int32(limit))
	assert.Greater(t, most.Load(), int32(1), "slow calls were handed off")
}

// TestSlowHandlerGetsBroadcastAfter: a broadcast datagram for a socket
// whose slow unicast call was handed off waits for that call, as a
// unicast one does, rather than reach the socket's handler while the
// call runs. In a network namespace of its own (127.255.255.255 on lo);
// it needs root.
func TestSlowHandlerGetsBroadcastAfter(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test must not skip there")
		}
		t.Skip("needs root for a network namespace")
	}
	// The subtest's goroutine locks its thread, which holds the
	// namespace, and never unlocks it: both end with the subtest.
	t.Run("namespace", func(t *testing.T) {
		runtime.LockOSThread()
		require.NoError(t, syscall.Unshare(syscall.CLONE_NEWNET), "unshare")
		out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput()
		require.NoError(t, err, "ip: %s", out)

		var in, most atomic.Int32
		var mu sync.Mutex
		var order []string
		started := make(chan struct{}, 1)
		srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
			n := in.Add(1)
			if n > most.Load() {
				most.Store(n)
			}
			mu.Lock()
			order = append(order, fmt.Sprintf("%s/%v", r.Payload, r.Multicast))
			mu.Unlock()
			if string(r.Payload) == "slow" {
				started <- struct{}{}
				time.Sleep(300 * time.Millisecond)
			}
			in.Add(-1)
			_ = r.Reply(r.Payload)
		}, serve.Options{IPv4Only: true})
		require.NoError(t, err)
		defer srv.Close()
		port := boundPort(t, srv, "0.0.0.0", "wild").LocalAddr().Port()
		cl := client(t, "127.0.0.1")
		allowBroadcast(t, cl)

		_, err = cl.WriteToUDPAddrPort([]byte("slow"), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port))
		require.NoError(t, err)
		<-started
		time.Sleep(20 * time.Millisecond) // the call is handed off by now
		_, err = cl.WriteToUDPAddrPort([]byte("bcast"), netip.AddrPortFrom(netip.MustParseAddr("127.255.255.255"), port))
		require.NoError(t, err)
		buf := make([]byte, 64)
		require.NoError(t, cl.SetReadDeadline(time.Now().Add(readTimeout)))
		for range 2 {
			_, _, err := cl.ReadFromUDPAddrPort(buf)
			require.NoError(t, err)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"slow/false", "bcast/true"}, order)
		assert.Equal(t, int32(1), most.Load(), "calls for one socket at a time")
	})
}
