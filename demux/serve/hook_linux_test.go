package serve_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// TestUserHookChain checks the chain of port hooks: the caller's
// Config.OnPort hears of a port once the server has opened its kernel
// sockets (and before it closes them), and its veto closes them again.
func TestUserHookChain(t *testing.T) {
	errVeto := errors.New("vetoed by the caller")
	var srv *serve.Server[string]
	var log []string
	veto := false
	cfg := demux.Config{OnPort: func(port uint16, inUse bool) error {
		log = append(log, fmt.Sprintf("%v ports=%d", inUse, srv.Stats().Ports))
		if inUse && veto {
			return errVeto
		}
		return nil
	}}
	srv, err := serve.New[string](cfg, func(*serve.Request[string]) {}, serve.Options{})
	require.NoError(t, err)
	defer srv.Stop()
	lo := netip.MustParseAddr("127.0.0.1")
	var s *demux.Socket[string]
	for range 10 {
		if s, err = srv.Table().Bind(demux.Options{Addr: lo}, "s"); err == nil {
			break
		}
	}
	require.NoError(t, err)
	port := s.LocalAddr().Port()
	require.NoError(t, srv.Table().Close(s))
	assert.Equal(t, []string{"true ports=1", "false ports=0"}, log)

	veto = true
	_, err = srv.Table().Bind(demux.Options{Addr: lo, Port: port}, "vetoed")
	require.ErrorIs(t, err, errVeto)
	assert.Zero(t, srv.Stats().Ports)
	// The kernel sockets were closed: the port is free on the host.
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
	require.NoError(t, err, "the vetoed port's kernel socket is still open")
	require.NoError(t, c.Close())
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(es)
}

// settles waits until f returns want, for counts that fall as goroutines
// end, and returns what it last read.
func settles(want int, f func() int) int {
	deadline := time.Now().Add(readTimeout)
	n := f()
	for n != want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		n = f()
	}
	return n
}

// quietGoroutines waits until the number of goroutines has not changed
// for 100 ms (what other tests' servers left, such as a monitor that
// ends after its idle ticks, has ended) and returns it.
func quietGoroutines() int {
	n := runtime.NumGoroutine()
	for still := time.Now(); time.Since(still) < 100*time.Millisecond; time.Sleep(5 * time.Millisecond) {
		if m := runtime.NumGoroutine(); m != n {
			n, still = m, time.Now()
		}
	}
	return n
}

// TestUserHookPanic: a caller's OnPort that panics when the server has
// already opened the port's kernel sockets leaves nothing behind: the
// bind fails with the panic, the kernel sockets and their readers are
// gone, and the next bind on the port works and is served.
func TestUserHookPanic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inUse bool // the event that panics
	}{
		{"open", true},
		{"close", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Counted before the server: with no port in use it has
			// neither kernel sockets nor goroutines.
			gs := quietGoroutines()
			fds := openFDs(t)
			var armed atomic.Bool
			cfg := demux.Config{OnPort: func(port uint16, inUse bool) error {
				if inUse == tc.inUse && armed.Load() {
					panic("hook")
				}
				return nil
			}}
			srv, err := serve.New[string](cfg, func(r *serve.Request[string]) { r.Reply(r.Payload) }, serve.Options{})
			require.NoError(t, err)
			defer srv.Close()
			lo := netip.MustParseAddr("127.0.0.1")
			// A port the kernel lets the server have.
			var port uint16
			for range 10 {
				s, err := srv.Table().Bind(demux.Options{Addr: lo}, "probe")
				if err == nil {
					port = s.LocalAddr().Port()
					require.NoError(t, s.Close())
					break
				}
			}
			require.NotZero(t, port)

			armed.Store(true)
			bind := func() (s *demux.Socket[string], p any, err error) {
				defer func() { p = recover() }()
				s, err = srv.Table().Bind(demux.Options{Addr: lo, Port: port}, "s")
				return s, nil, err
			}
			s, p, err := bind()
			if tc.inUse {
				require.Equal(t, "hook", p, "the panic reaches the caller of Bind")
			} else {
				require.NoError(t, err)
				require.Nil(t, p)
				func() {
					defer func() { p = recover() }()
					_ = s.Close()
				}()
				require.Equal(t, "hook", p, "the panic reaches the caller of Close")
			}
			armed.Store(false)
			assert.Zero(t, srv.Stats().Ports)
			assert.Equal(t, fds, settles(fds, func() int { return openFDs(t) }), "file descriptors")
			assert.Equal(t, gs, settles(gs, runtime.NumGoroutine), "goroutines")

			// The next bind neither hangs nor fails, and is served.
			done := make(chan error, 1)
			go func() {
				_, err := srv.Table().Bind(demux.Options{Addr: lo, Port: port}, "again")
				done <- err
			}()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(readTimeout):
				t.Fatal("the bind after the panic hangs")
			}
			c := client(t, "127.0.0.1")
			got, _ := ask(t, c, netip.AddrPortFrom(lo, port), "ping")
			assert.Equal(t, "ping", got)
		})
	}
}
