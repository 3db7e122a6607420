package serve_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/ipv4"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// boundPort binds a socket on addr with port 0 in srv's table, retrying
// when the kernel holds the port the table chose.
func boundPort(t *testing.T, srv *serve.Server[string], addr, val string) *demux.Socket[string] {
	t.Helper()
	for range 10 {
		s, err := srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr(addr)}, val)
		if err == nil {
			return s
		}
	}
	t.Fatal("no free port")
	return nil
}

// TestReplyThenCloseLastSocket: a handler replies, then closes the
// port's last socket. The reply was queued before the close, so it is
// sent; a bind on the port made in the same handler is served.
func TestReplyThenCloseLastSocket(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rebind bool // bind the port again after the close
	}{
		{"close", false},
		{"close and bind again", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srv *serve.Server[string]
			rebound := make(chan error, 1)
			srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
				r.Reply(append([]byte("reply:"), r.Payload...))
				if r.Value != "first" {
					return
				}
				port := r.Socket.LocalAddr().Port()
				_ = r.Socket.Close()
				if tc.rebind {
					_, err := srv.Table().Bind(demux.Options{Addr: r.Dst.Addr(), Port: port}, "second")
					rebound <- err
				}
			}, serve.Options{})
			require.NoError(t, err)
			defer srv.Close()
			s := boundPort(t, srv, "127.0.0.1", "first")
			dst := s.LocalAddr()
			c := client(t, "127.0.0.1")
			got, from := ask(t, c, dst, "a")
			assert.Equal(t, "reply:a", got)
			assert.Equal(t, dst, from)
			if tc.rebind {
				require.NoError(t, <-rebound)
				got, _ = ask(t, c, dst, "b")
				assert.Equal(t, "reply:b", got)
				assert.Equal(t, 1, srv.Stats().Ports)
			} else {
				assert.Zero(t, srv.Stats().Ports)
				// The kernel socket closes once the batch is done.
				waitFor(t, func() bool {
					k, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.IPv4Unspecified(), dst.Port())))
					if err == nil {
						_ = k.Close()
					}
					return err == nil
				}, "the port is free on the host")
			}
			// The client can have the reply before the reader counts it.
			waitFor(t, func() bool { st := srv.Stats(); return st.Replies == st.Delivered }, "every reply is counted")
			assert.Zero(t, srv.Stats().ReplyErrors)
		})
	}
}

// TestClosedDuringBatchReceivesNothing: a handler closes a socket while
// later datagrams for it wait in the same batch (all looked up before
// the first handler ran). None of them reaches the closed socket, whether
// it has a handler or a Conn: Linux discards a closed socket's queue.
func TestClosedDuringBatchReceivesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		conn bool // the closed socket has a Conn
	}{
		{"handler", false},
		{"conn", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const later = 6
			hold, release := make(chan struct{}), make(chan struct{})
			// Read by handlers on goroutines that a hand-off starts.
			var victim atomic.Pointer[demux.Socket[string]]
			var mu sync.Mutex
			var after []string // datagrams the closed socket got
			srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
				switch p := string(r.Payload); {
				case p == "hold":
					close(hold)
					<-release
				case p == "close":
					require.NoError(t, victim.Load().Close())
				case r.Socket == victim.Load():
					mu.Lock()
					after = append(after, p)
					mu.Unlock()
				}
			}, serve.Options{})
			require.NoError(t, err)
			defer srv.Close()
			keeper := boundPort(t, srv, "127.0.0.1", "keeper")
			port := keeper.LocalAddr().Port()
			v, err := srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), Port: port}, "victim")
			require.NoError(t, err)
			victim.Store(v)
			// "close" goes to a socket of its own: were it the held
			// socket's, it would wait for the held call, while the
			// reader that the hand-off starts delivered the late ones.
			_, err = srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.3"), Port: port}, "closer")
			require.NoError(t, err)
			var conned atomic.Int32
			if tc.conn {
				c, err := srv.SocketConn(v)
				require.NoError(t, err)
				go func() {
					buf := make([]byte, 64)
					for {
						if _, _, err := c.ReadFrom(buf); err != nil {
							return
						}
						conned.Add(1)
					}
				}()
			}
			cl := client(t, "127.0.0.1")
			send := func(to, p string) {
				_, err := cl.WriteToUDPAddrPort([]byte(p), netip.AddrPortFrom(netip.MustParseAddr(to), port))
				require.NoError(t, err)
			}
			// The reader blocks in the first handler; meanwhile the
			// rest queue up in the kernel and make the next batch, which
			// the reader that the hand-off of the held call starts reads
			// (or the reader itself, after the release).
			before := srv.Stats()
			send("127.0.0.1", "hold")
			<-hold
			send("127.0.0.3", "close")
			for i := range later {
				send("127.0.0.2", fmt.Sprint("late", i))
			}
			close(release)
			waitFor(t, func() bool { return srv.Stats().Received == before.Received+2+later }, "the batch is read")
			waitFor(t, func() bool { return srv.Stats().Unmatched == before.Unmatched+later }, "its late datagrams are unmatched")
			time.Sleep(20 * time.Millisecond) // a Conn's read would have returned by now
			mu.Lock()
			defer mu.Unlock()
			assert.Empty(t, after, "handler calls for the closed socket")
			assert.Zero(t, conned.Load(), "datagrams read from the closed socket's Conn")
		})
	}
}

// TestStaleRequestRefused: a Request kept past its handler's return
// refuses Reply with ErrRequestDone, whether called between other
// datagrams' handlers or while they run, and no client gets its reply:
// neither the one it was for nor the one served since.
func TestStaleRequestRefused(t *testing.T) {
	for _, tc := range []struct {
		name       string
		concurrent bool // Reply while other handlers run
	}{
		{"between handlers", false},
		{"while handlers run", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept := make(chan *serve.Request[string], 1)
			srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
				if string(r.Payload) == "keep" {
					kept <- r
					return
				}
				require.NoError(t, r.Reply(append([]byte("ok:"), r.Payload...)))
			}, serve.Options{})
			require.NoError(t, err)
			defer srv.Close()
			dst := boundPort(t, srv, "127.0.0.1", "s").LocalAddr()
			a, b := client(t, "127.0.0.1"), client(t, "127.0.0.1")
			_, err = a.WriteToUDPAddrPort([]byte("keep"), dst)
			require.NoError(t, err)
			var stale *serve.Request[string]
			select {
			case stale = <-kept:
			case <-time.After(readTimeout):
				t.Fatal("the handler did not run")
			}
			// The handler sent stale before it returned: a reply to
			// another datagram, which the reader handles after that
			// call, says that the call is over.
			got, _ := ask(t, b, dst, "sync")
			require.Equal(t, "ok:sync", got)
			secret := []byte("secret for A")

			stop := make(chan struct{})
			refused := make(chan error, 1)
			if tc.concurrent {
				go func() {
					for {
						select {
						case <-stop:
							refused <- nil
							return
						default:
						}
						if err := stale.Reply(secret); !errors.Is(err, serve.ErrRequestDone) {
							refused <- fmt.Errorf("stale Reply: %v", err)
							return
						}
					}
				}()
			}
			for i := range 20 {
				if !tc.concurrent {
					require.ErrorIs(t, stale.Reply(secret), serve.ErrRequestDone)
				}
				q := fmt.Sprint("b", i)
				got, _ := ask(t, b, dst, q)
				require.Equal(t, "ok:"+q, got)
			}
			if tc.concurrent {
				close(stop)
				require.NoError(t, <-refused)
			}
			require.NoError(t, a.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
			n, _, err := a.ReadFromUDPAddrPort(make([]byte, 64))
			require.Error(t, err, "the first client got %d bytes", n)
			waitFor(t, func() bool { return srv.Stats().Replies == 21 }, "21 replies counted")
			assert.Zero(t, srv.Stats().ReplyErrors)
		})
	}
}

// TestConnClosedThroughTableReadsNothing: when a Conn's socket is closed
// through the table, the Conn's reads fail with net.ErrClosed at once,
// without returning the datagrams it had queued, as reads on a closed
// kernel socket do; the server's periodic check need not have run.
func TestConnClosedThroughTableReadsNothing(t *testing.T) {
	for _, read := range []struct {
		name string
		f    func(c *serve.Conn) error
	}{
		{"ReadFrom", func(c *serve.Conn) error { _, _, err := c.ReadFrom(make([]byte, 64)); return err }},
		{"ReadBatch", func(c *serve.Conn) error {
			ms := []ipv4.Message{{Buffers: [][]byte{make([]byte, 64)}}}
			_, err := c.ReadBatch(ms, 0)
			return err
		}},
	} {
		t.Run(read.name, func(t *testing.T) {
			srv, err := serve.New[string](demux.Config{}, nil, serve.Options{})
			require.NoError(t, err)
			defer srv.Close()
			sk := boundPort(t, srv, "127.0.0.1", "s")
			c, err := srv.SocketConn(sk)
			require.NoError(t, err)
			cl := client(t, "127.0.0.1")
			for range 3 {
				_, err := cl.WriteToUDPAddrPort([]byte("queued"), sk.LocalAddr())
				require.NoError(t, err)
			}
			waitFor(t, func() bool { return srv.Stats().Delivered == 3 }, "3 datagrams queued for the Conn")
			require.NoError(t, sk.Close())
			require.ErrorIs(t, read.f(c), net.ErrClosed)
		})
	}
}
