package serve_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
				waitFor(t, func() bool { return srv.Stats().Ports == 0 }, "the port is out of use")
			}
			st := srv.Stats()
			assert.Zero(t, st.ReplyErrors)
			assert.Equal(t, st.Delivered, st.Replies)
		})
	}
}
