package serve_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

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
