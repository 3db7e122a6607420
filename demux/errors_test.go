package demux_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// TestErrorPrefix: every error of the API reads "udpdemux: " once, with no
// internal package's prefix, and wraps its errno.
func TestErrorPrefix(t *testing.T) {
	var errs []error
	for _, cfg := range []demux.Config{{Slots: 100}, {Slots: 1 << 20}, {Threshold: -1}, {Strategy: 9}, {Ephemeral: 9}, {PortLow: 9, PortHigh: 1}} {
		_, err := demux.New[int](cfg)
		require.Error(t, err, "%+v", cfg)
		require.ErrorIs(t, err, syscall.EINVAL)
		var op *demux.OpError
		require.True(t, errors.As(err, &op))
		assert.Equal(t, "new", op.Op)
		errs = append(errs, err)
	}
	tab, err := demux.New[int](demux.Config{})
	require.NoError(t, err)
	s, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 53}, 1)
	require.NoError(t, err)
	_, err = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 53}, 1)
	errs = append(errs, err)
	errs = append(errs, s.Connect(netip.MustParseAddrPort("[::1]:5"), netip.Addr{}))
	require.NoError(t, s.Close())
	errs = append(errs, s.Close())
	for _, err := range errs {
		require.Error(t, err)
		msg := err.Error()
		assert.True(t, strings.HasPrefix(msg, "udpdemux: "), msg)
		for _, p := range []string{"demux:", "hash1:", "hash2:", "bind:", "ipv6:", "model:"} {
			assert.NotContains(t, strings.TrimPrefix(msg, "udpdemux: "), " "+p, msg)
			assert.False(t, strings.HasPrefix(strings.TrimPrefix(msg, "udpdemux: "), p), msg)
		}
	}
}

// TestClosedErrors: every operation on a closed socket fails with an error
// that matches both EBADF (Linux's errno) and net.ErrClosed (what Go code
// serving a net.PacketConn stops at); a socket of another table is EBADF
// only, since it is not closed.
func TestClosedErrors(t *testing.T) {
	tab, err := demux.New[int](demux.Config{})
	require.NoError(t, err)
	s, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.1"), Port: 53}, 1)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	for name, err := range map[string]error{
		"close":      s.Close(),
		"connect":    s.Connect(netip.MustParseAddrPort("127.0.0.2:5"), netip.Addr{}),
		"disconnect": s.Disconnect(),
		"setdevice":  s.SetDevice(1),
	} {
		assert.ErrorIs(t, err, syscall.EBADF, name)
		assert.ErrorIs(t, err, net.ErrClosed, name)
	}
	other, err := demux.New[int](demux.Config{})
	require.NoError(t, err)
	err = other.Close(s)
	assert.ErrorIs(t, err, syscall.EBADF)
	assert.NotErrorIs(t, err, net.ErrClosed)
}
