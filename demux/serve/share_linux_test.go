package serve_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// holderEnv makes the test binary a holder (TestPortHolder): its value is
// the address to bind, port 0, and "reuse" or "noreuse" for SO_REUSEADDR.
const holderEnv = "UDPDEMUX_SERVE_HOLDER"

// TestPortHolder is not a test: run by TestShareWithOtherProgram in a
// process of its own, it is the other program. It binds the address in
// holderEnv on a free port, with SO_REUSEADDR or not, writes "port N" on
// stdout, answers each datagram with "holder|" and its payload, and exits
// when its stdin closes.
func TestPortHolder(t *testing.T) {
	spec := os.Getenv(holderEnv)
	if spec == "" {
		t.Skip("run by TestShareWithOtherProgram")
	}
	addr, mode, _ := strings.Cut(spec, "/")
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if mode == "reuse" {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", net.JoinHostPort(addr, "0"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString(0) // until EOF
		os.Exit(0)
	}()
	fmt.Println("port", pc.LocalAddr().(*net.UDPAddr).Port)
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			os.Exit(1)
		}
		_, _ = pc.WriteTo(append([]byte("holder|"), buf[:n]...), from)
	}
}

// startHolder starts the other program, holding addr with SO_REUSEADDR
// or not, and returns the port it holds. It is killed in t.Cleanup.
func startHolder(ctx context.Context, t *testing.T, addr string, reuse bool) uint16 {
	mode := "noreuse"
	if reuse {
		mode = "reuse"
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPortHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), holderEnv+"="+addr+"/"+mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		p, ok := strings.CutPrefix(s, "port ")
		require.True(t, ok, "holder said %q", s)
		port, err := strconv.ParseUint(p, 10, 16)
		require.NoError(t, err)
		return uint16(port)
	case <-ctx.Done():
		t.Fatal("holder not ready in time")
		return 0
	}
}

// TestShareWithOtherProgram: another program (a second process) holds
// 127.0.0.53 on a port, as systemd-resolved holds port 53. With
// SO_REUSEADDR on its socket, a table socket binds beside it, on another
// address or on the wildcard address with ReuseAddr, and receives; the
// other program still receives what is sent to its own address, the more
// specific one. Without SO_REUSEADDR on the other program's socket, the
// port cannot be served (one wildcard kernel socket per family serves the
// port): the bind fails with EADDRINUSE and the table stays as it was.
func TestShareWithOtherProgram(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reuse   bool // the other program's SO_REUSEADDR
		opts    demux.Options
		refused bool
	}{
		{"specific beside reuse", true, demux.Options{Addr: netip.MustParseAddr("127.0.0.2")}, false},
		{"wildcard beside reuse", true, demux.Options{Addr: netip.IPv4Unspecified(), ReuseAddr: true}, false},
		{"specific beside noreuse", false, demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), ReuseAddr: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			port := startHolder(ctx, t, "127.0.0.53", tc.reuse)
			srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
				r.Reply([]byte(r.Value + "|" + string(r.Payload)))
			}, serve.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })
			o := tc.opts
			o.Port = port
			_, err = srv.Table().Bind(o, "table")
			cl := client(t, "127.0.0.9")
			if tc.refused {
				require.ErrorIs(t, err, syscall.EADDRINUSE)
				assert.Zero(t, srv.Table().Len())
				assert.Zero(t, srv.Stats().Ports)
			} else {
				require.NoError(t, err)
				got, from := ask(t, cl, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port), "a")
				assert.Equal(t, "table|a", got)
				assert.Equal(t, netip.MustParseAddrPort(fmt.Sprintf("127.0.0.2:%d", port)), from)
			}
			got, _ := ask(t, cl, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.53"), port), "b")
			assert.Equal(t, "holder|b", got)
			require.NoError(t, ctx.Err())
		})
	}
}

// TestPortStaysClaimed: SO_REUSEADDR is set on a kernel socket for its
// bind only, so a port that a server serves is not taken by another
// server's kernel socket (which would take its datagrams), nor by another
// socket on the host, even with SO_REUSEADDR.
func TestPortStaysClaimed(t *testing.T) {
	a, err := serve.New[string](demux.Config{}, func(*serve.Request[string]) {}, serve.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	b, err := serve.New[string](demux.Config{}, func(*serve.Request[string]) {}, serve.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	var port uint16
	for range 10 {
		s, err := a.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), ReuseAddr: true}, "a")
		if errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		require.NoError(t, err)
		port = s.LocalAddr().Port()
		break
	}
	require.NotZero(t, port, "no free port")
	_, err = b.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.3"), Port: port, ReuseAddr: true}, "b")
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	assert.Zero(t, b.Table().Len())
	assert.Zero(t, b.Stats().Ports)
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("127.0.0.53:%d", port))
	if err == nil {
		_ = pc.Close()
	}
	require.ErrorIs(t, err, syscall.EADDRINUSE)
}
