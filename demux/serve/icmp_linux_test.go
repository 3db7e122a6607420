package serve_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// TestPortUnreachable: with Options.PortUnreachable, a client that sends
// to an address of a served port that no table socket holds gets
// ECONNREFUSED from its connected socket, as from Linux, in both
// families, while a client of a socket the table holds gets its answer;
// without it, the client hears nothing. Raw sockets need root; CI runs as
// root, and there the test must run.
func TestPortUnreachable(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test must not skip there")
		}
		t.Skip("raw sockets need CAP_NET_RAW")
	}
	for _, on := range []bool{true, false} {
		name := "off"
		if on {
			name = "on"
		}
		t.Run(name, func(t *testing.T) {
			srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
				r.Reply([]byte(r.Value))
			}, serve.Options{PortUnreachable: on})
			require.NoError(t, err)
			defer srv.Close()
			s, err := srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2")}, "held")
			require.NoError(t, err)
			port := s.LocalAddr().Port()
			v6 := true
			if _, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
				v6 = false
			}

			exchange := func(to netip.AddrPort, wait time.Duration) (string, error) {
				c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
				require.NoError(t, err)
				defer c.Close()
				_, err = c.Write([]byte("q"))
				require.NoError(t, err)
				require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
				buf := make([]byte, 64)
				n, err := c.Read(buf)
				return string(buf[:n]), err
			}
			got, err := exchange(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port), 3*time.Second)
			require.NoError(t, err)
			assert.Equal(t, "held", got)

			targets := []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), port)}
			if v6 {
				targets = append(targets, netip.AddrPortFrom(netip.IPv6Loopback(), port))
			}
			t.Logf("unmatched targets: %v", targets)
			for _, to := range targets {
				if on {
					_, err := exchange(to, 3*time.Second)
					assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "to %v: %v", to, err)
				} else {
					_, err := exchange(to, 300*time.Millisecond)
					assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "to %v: %v", to, err)
				}
			}
			require.NoError(t, srv.Stop())
			st := srv.Stats()
			assert.Equal(t, uint64(len(targets)), st.Unmatched)
			if on {
				assert.Equal(t, uint64(len(targets)), st.ICMPSent)
			} else {
				assert.Zero(t, st.ICMPSent)
			}
			assert.Zero(t, st.ICMPErrors+st.ICMPLimited)
		})
	}
}
