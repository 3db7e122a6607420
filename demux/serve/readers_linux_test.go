package serve

import (
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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/udpdemux/udpdemux/demux"
)

// readersWait bounds every wait of the readers' tests.
const readersWait = 10 * time.Second

// waitDelivered waits until delivered() reaches want, calling resend (if
// not nil) each time a while passes without progress, and otherwise fails
// with the counts at the end of the wait: the server's, and the datagrams
// that the kernel's per-CPU input queues dropped since backlog0 (loopback
// traffic of every test on the machine shares them, and a datagram they
// drop reaches no socket to count it).
func waitDelivered[V any](t *testing.T, s *Server[V], delivered func() uint64, want, backlog0 uint64, resend func()) {
	t.Helper()
	deadline := time.Now().Add(readersWait)
	last, since := delivered(), time.Now()
	for n := last; n < want; n = delivered() {
		if time.Now().After(deadline) {
			st := s.Stats()
			require.FailNowf(t, "not delivered", "delivered %d of %d; server received %d, unmatched %d, kernel drops %d; input queue drops %d",
				n, want, st.Received, st.Unmatched, st.KernelDrops, backlogDrops(t)-backlog0)
		}
		if n != last {
			last, since = n, time.Now()
		} else if resend != nil && time.Since(since) > 200*time.Millisecond {
			resend()
			since = time.Now()
		}
		time.Sleep(time.Millisecond)
	}
}

// backlogDrops returns the datagrams the kernel's per-CPU input queues
// have dropped since boot: the second column of /proc/net/softnet_stat,
// summed over CPUs.
func backlogDrops(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/softnet_stat")
	require.NoError(t, err)
	var sum uint64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 2, "softnet_stat line %q", line)
		n, err := strconv.ParseUint(f[1], 16, 64)
		require.NoError(t, err, "softnet_stat line %q", line)
		sum += n
	}
	return sum
}

// portListeners returns the kernel sockets serving port: by address
// (IPv4 first), each address's first reader first.
func portListeners[V any](s *Server[V], port uint16) []*listener[V] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []sockKey
	for k := range s.groups {
		if k.port == port {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y sockKey) int { return x.addr.Compare(y.addr) })
	var ls []*listener[V]
	for _, k := range keys {
		ls = append(ls, s.groups[k].ls...)
	}
	return ls
}

// TestReadersSpreadFlows: with Options.Readers 2, the kernel spreads a
// port's flows over two kernel sockets, each read by its own goroutine;
// every datagram still reaches the table socket it was sent to, and each
// flow's datagrams reach it in the order they were sent.
func TestReadersSpreadFlows(t *testing.T) {
	const (
		addrs   = 4
		clients = 32
		each    = 40 // datagrams per client and address
	)
	type flow struct {
		sock   string
		client netip.AddrPort
	}
	var (
		mu    sync.Mutex
		seqs  = map[flow][]int{}
		wrong []string
	)
	s, err := New[string](demux.Config{}, func(r *Request[string]) {
		f := strings.Split(string(r.Payload), "|")
		var seq int
		_, _ = fmt.Sscan(f[1], &seq)
		mu.Lock()
		defer mu.Unlock()
		if f[0] != r.Value {
			wrong = append(wrong, fmt.Sprintf("%s got %q", r.Value, r.Payload))
		}
		k := flow{r.Value, r.Src}
		seqs[k] = append(seqs[k], seq)
	}, Options{IPv4Only: true, Readers: 2, ReadBuffer: 8 << 20})
	require.NoError(t, err)
	defer s.Close()

	var port uint16
	var dsts []netip.AddrPort
	for i := range addrs {
		a := netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)})
		sk, err := s.Table().Bind(demux.Options{Addr: a, Port: port}, a.String())
		require.NoError(t, err)
		port = sk.Options().Port
		dsts = append(dsts, sk.LocalAddr())
	}
	ls := portListeners(s, port)
	require.Len(t, ls, 2, "kernel sockets of the port")

	backlog0 := backlogDrops(t)
	for range clients {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		require.NoError(t, err)
		defer c.Close()
		for seq := range each {
			for _, d := range dsts {
				_, err := c.WriteToUDPAddrPort(fmt.Appendf(nil, "%s|%d", d.Addr(), seq), d)
				require.NoError(t, err)
			}
		}
	}
	total := uint64(addrs * clients * each)
	waitDelivered(t, s, func() uint64 { return s.Stats().Delivered }, total, backlog0, nil)

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, wrong, "datagrams at a socket they were not sent to")
	assert.Len(t, seqs, addrs*clients, "flows")
	for f, got := range seqs {
		want := make([]int, each)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, got, "the order of flow %v", f)
	}
	for i, l := range ls {
		assert.NotZero(t, l.c[nReceived].Load(), "datagrams read by reader %d", i)
	}
}

// TestReadersSpreadOnePeer: with Options.Readers 2, one peer's datagrams
// from one source port to many addresses of the port still spread over
// both readers. The kernel's own SO_REUSEPORT hash for a wildcard socket
// covers the wildcard address, not the destination, and would give them
// all to one reader; the program that the group runs (steerFlows) hashes
// the destination too. IPv6 runs in a network namespace of its own, with
// the destinations on its loopback, and needs root (in CI it must run).
func TestReadersSpreadOnePeer(t *testing.T) {
	const addrs, each = 16, 20
	for _, c := range []struct {
		name string
		v6   bool
		dst  func(i int) netip.Addr
	}{
		{"ipv4", false, func(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)}) }},
		// Destinations that differ only in bits 17 to 23 of the address
		// word: a hash that took the reader from the low bits alone would
		// give them all one reader.
		{"ipv4 high bits", false, func(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, byte(2 + 2*i), 0, 2}) }},
		{"ipv6", true, func(i int) netip.Addr { return netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(2 + i)}) }},
	} {
		v6, dst := c.v6, c.dst
		t.Run(c.name, func(t *testing.T) {
			src := netip.MustParseAddr("127.0.0.1")
			if v6 {
				if os.Geteuid() != 0 {
					if os.Getenv("CI") == "true" {
						t.Fatal("CI runs as root; this test must not skip there")
					}
					t.Skip("needs root for a network namespace")
				}
				src = netip.IPv6Loopback()
				// The namespace is the thread's, which the test never
				// unlocks: it ends with the test.
				runtime.LockOSThread()
				require.NoError(t, syscall.Unshare(syscall.CLONE_NEWNET), "unshare")
				args := [][]string{{"link", "set", "lo", "up"}}
				for i := range addrs {
					args = append(args, []string{"addr", "add", dst(i).String() + "/128", "dev", "lo", "nodad"})
				}
				for _, a := range args {
					out, err := exec.Command("ip", a...).CombinedOutput()
					require.NoError(t, err, "ip %s: %s", strings.Join(a, " "), out)
				}
			}
			var delivered atomic.Uint64
			s, err := New[int](demux.Config{}, func(r *Request[int]) { delivered.Add(1) },
				Options{IPv4Only: !v6, Readers: 2, ReadBuffer: 4 << 20})
			require.NoError(t, err)
			defer s.Close()
			var port uint16
			for i := range addrs {
				sk, err := s.Table().Bind(demux.Options{Addr: dst(i), Port: port}, i)
				require.NoError(t, err)
				port = sk.Options().Port
			}
			var ls []*listener[int]
			for _, l := range portListeners(s, port) {
				if l.addr.Is6() == v6 {
					ls = append(ls, l)
				}
			}
			require.Len(t, ls, 2, "kernel sockets of the port and family")

			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
			require.NoError(t, err)
			defer c.Close()
			round := func() {
				for i := range addrs {
					_, err := c.WriteToUDPAddrPort([]byte("x"), netip.AddrPortFrom(dst(i), port))
					require.NoError(t, err)
				}
			}
			backlog0 := backlogDrops(t)
			for range each {
				round()
			}
			// The spread is what is tested, not that loopback loses
			// nothing: a round lost on a loaded machine is sent again.
			waitDelivered(t, s, delivered.Load, addrs*each, backlog0, round)
			for i, l := range ls {
				assert.NotZero(t, l.c[nReceived].Load(), "datagrams read by reader %d", i)
			}
		})
	}
}

// TestReadersOneCopyOfBroadcast: the kernel gives every socket of an
// SO_REUSEPORT group a copy of a broadcast or multicast datagram; with
// Options.Readers 2, each table socket still receives it once.
func TestReadersOneCopyOfBroadcast(t *testing.T) {
	const sent = 20
	var (
		mu  sync.Mutex
		got = map[string]int{}
	)
	s, err := New[string](demux.Config{}, func(r *Request[string]) {
		mu.Lock()
		defer mu.Unlock()
		got[r.Value]++
	}, Options{IPv4Only: true, Readers: 2})
	require.NoError(t, err)
	defer s.Close()
	a, err := s.Table().Bind(demux.Options{Addr: netip.IPv4Unspecified(), ReuseAddr: true}, "a")
	require.NoError(t, err)
	port := a.Options().Port
	_, err = s.Table().Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: port, ReuseAddr: true}, "b")
	require.NoError(t, err)
	ls := portListeners(s, port)
	require.Len(t, ls, 2, "kernel sockets of the port")

	c := broadcaster(t)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.255.255.255"), port)
	for range sent {
		_, err := c.WriteToUDPAddrPort([]byte("b"), dst)
		require.NoError(t, err)
	}
	// Both kernel sockets hold a copy of each: done once both are
	// drained and their readers between batches.
	require.Eventually(t, func() bool {
		for _, l := range ls {
			if queued(t, l) != 0 {
				return false
			}
			l.bmu.Lock()
			busy := l.busy
			l.bmu.Unlock()
			if busy != 0 {
				return false
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return got["a"] >= sent && got["b"] >= sent
	}, readersWait, time.Millisecond, "broadcasts delivered")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{"a": sent, "b": sent}, got, "copies per table socket")
	assert.Equal(t, uint64(sent), s.Stats().Received, "datagrams counted as received")
	// What the design rests on: the kernel gave the second reader a copy
	// of each broadcast too. Were it to give each to one socket of the
	// group, the copies dropped here would be datagrams lost.
	assert.Zero(t, ls[0].c[nCopies].Load(), "copies dropped by the first reader")
	assert.Equal(t, uint64(sent), ls[1].c[nCopies].Load(), "copies dropped by the second reader")
}

// broadcaster returns a client socket on 127.0.0.1 that may send to a
// broadcast address (SO_BROADCAST), closed when the test ends.
func broadcaster(t *testing.T) *net.UDPConn {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
	}))
	require.NoError(t, serr)
	return c
}

// queued returns the bytes waiting in l's kernel socket.
func queued[V any](t *testing.T, l *listener[V]) int {
	var n int
	var qerr error
	err := l.rc.Control(func(fd uintptr) { n, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	if err != nil || qerr != nil {
		return 0 // closed: nothing waits
	}
	return n
}

// TestReadersCloseWithPort: the readers of a port close with its last
// table socket, leaving no file descriptor or goroutine, and the port
// binds again.
func TestReadersCloseWithPort(t *testing.T) {
	s, err := New[string](demux.Config{}, func(*Request[string]) {}, Options{Readers: 3})
	require.NoError(t, err)
	defer s.Close()
	fds, gs := openFDCount(t), runtime.NumGoroutine()
	sk, err := s.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2")}, "a")
	require.NoError(t, err)
	port := sk.Options().Port
	ls := portListeners(s, port)
	require.GreaterOrEqual(t, len(ls), 3, "kernel sockets: 3 per family")
	assert.Equal(t, fds+len(ls), openFDCount(t))

	require.NoError(t, sk.Close())
	// Polled here, not in assert.Eventually, whose own goroutines count.
	for deadline := time.Now().Add(readersWait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if runtime.NumGoroutine() <= gs && openFDCount(t) == fds {
			break
		}
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), gs, "goroutines")
	assert.Equal(t, fds, openFDCount(t), "descriptors")
	assert.Zero(t, s.Stats().Ports)
	_, err = s.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), Port: port}, "again")
	require.NoError(t, err)
	assert.Len(t, portListeners(s, port), len(ls))
}

// openFDCount counts the process's open file descriptors.
func openFDCount(t *testing.T) int {
	es, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(es)
}
