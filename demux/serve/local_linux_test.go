package serve_test

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// TestBindNeedsHostAddress: by default a bind to an address the host does
// not have fails with EADDRNOTAVAIL, as on Linux; every 127/8 address is
// the host's; Options.FreeBind lets any address bind, as IP_FREEBIND
// does; a Config.IsLocal of the caller's is kept.
func TestBindNeedsHostAddress(t *testing.T) {
	mine := func(a netip.Addr, _ int) bool { return a == netip.MustParseAddr("203.0.113.7") }
	for _, tc := range []struct {
		addr     string
		freeBind bool
		isLocal  func(netip.Addr, int) bool
		ok       bool
	}{
		{addr: "203.0.113.7"},
		{addr: "203.0.113.7", freeBind: true, ok: true},
		{addr: "203.0.113.7", isLocal: mine, ok: true},
		{addr: "2001:db8::7"},
		{addr: "2001:db8::7", freeBind: true, ok: true},
		{addr: "127.0.0.1", ok: true},
		{addr: "127.0.0.77", ok: true},
		{addr: "127.255.255.254", ok: true},
		{addr: "::ffff:127.0.0.5", ok: true},
		{addr: "::ffff:203.0.113.7"},
		{addr: "0.0.0.0", ok: true},
		{addr: "::", ok: true},
		{addr: "239.1.2.3", ok: true},
		{addr: "::1", ok: true},
	} {
		name := tc.addr
		if tc.freeBind {
			name += "/freebind"
		}
		if tc.isLocal != nil {
			name += "/own IsLocal"
		}
		t.Run(name, func(t *testing.T) {
			if tc.addr == "::1" && !hasIPv6Loopback(t) {
				t.Skip("no IPv6 loopback")
			}
			srv, err := serve.New[string](demux.Config{IsLocal: tc.isLocal}, func(*serve.Request[string]) {}, serve.Options{FreeBind: tc.freeBind})
			require.NoError(t, err)
			defer srv.Close()
			// bind(0): the port the table chooses may be held on the host
			// by another program (CI runs other packages' tests at the
			// same time), which fails the bind with EADDRINUSE, as the
			// package documents; another try takes another port.
			var s *demux.Socket[string]
			for range 5 {
				s, err = srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr(tc.addr)}, "s")
				if !errors.Is(err, syscall.EADDRINUSE) {
					break
				}
			}
			if tc.ok {
				require.NoError(t, err)
				require.NoError(t, s.Close())
				return
			}
			require.ErrorIs(t, err, syscall.EADDRNOTAVAIL)
			assert.Zero(t, srv.Stats().Ports, "no kernel socket for a refused bind")
		})
	}
}

// TestBindSeesAddressChanges adds an address to an interface and
// removes it again, in a network namespace of its own: the server's view
// of the host's addresses follows. It needs root.
func TestBindSeesAddressChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test must not skip there")
		}
		t.Skip("needs root for a network namespace")
	}
	// In a subtest, whose goroutine locks its thread and never unlocks
	// it: the thread, and the namespace with it, end with the subtest.
	t.Run("namespace", func(t *testing.T) {
		runtime.LockOSThread()
		require.NoError(t, syscall.Unshare(syscall.CLONE_NEWNET), "unshare")
		ip := func(args ...string) {
			out, err := exec.Command("ip", args...).CombinedOutput()
			require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
		}
		ip("link", "set", "lo", "up")
		ip("link", "add", "v0", "type", "veth", "peer", "name", "v1")
		srv, err := serve.New[string](demux.Config{}, func(*serve.Request[string]) {}, serve.Options{})
		require.NoError(t, err)
		defer srv.Close()
		bind := func(a string) error {
			s, err := srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr(a)}, "s")
			if err == nil {
				_ = s.Close()
			}
			return err
		}
		require.ErrorIs(t, bind("10.9.0.1"), syscall.EADDRNOTAVAIL)
		require.ErrorIs(t, bind("10.9.0.255"), syscall.EADDRNOTAVAIL)
		ip("addr", "add", "10.9.0.1/24", "dev", "v0")
		// A miss reads the addresses again, at most every 10 ms: well
		// before the second after which a hit would.
		assert.True(t, eventually(200*time.Millisecond, func() bool { return bind("10.9.0.1") == nil }), "a new address binds")
		assert.ErrorIs(t, bind("10.9.0.255"), syscall.EADDRNOTAVAIL, "a broadcast address of an interface that is down")
		assert.ErrorIs(t, bind("10.9.0.0"), syscall.EADDRNOTAVAIL)
		ip("link", "set", "v1", "up")
		ip("link", "set", "v0", "up")
		assert.True(t, eventually(readTimeout, func() bool { return bind("10.9.0.255") == nil }), "the broadcast address of an interface that is up")
		ip("addr", "del", "10.9.0.1/24", "dev", "v0")
		// A hit reads them again once a second.
		assert.True(t, eventually(readTimeout, func() bool { return bind("10.9.0.1") != nil }), "a removed address no longer binds")
		assert.ErrorIs(t, bind("10.9.0.1"), syscall.EADDRNOTAVAIL)
	})
}

// eventually reports whether f returns true within d.
func eventually(d time.Duration, f func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return false
}
