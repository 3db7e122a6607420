// Package interop_test runs software that nobody in this project wrote,
// quic-go and miekg/dns, unmodified on table sockets of demux/serve, all
// on one kernel port at the same time. It is a module of its own so that
// the library's users never download either.
package interop_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
	"github.com/udpdemux/udpdemux/interop/services"
)

// testTimeout bounds each test: every blocking call below takes a
// context or a deadline derived from it.
const testTimeout = 2 * time.Minute

// echoSize is what the QUIC client sends and reads back.
const echoSize = 16 << 20

func TestMain(m *testing.M) {
	// quic-go logs once that it cannot size the send buffer of a
	// PacketConn that is not a *net.UDPConn; a Conn has none of its own.
	_ = os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	os.Exit(m.Run())
}

// tlsConfigs returns services.TLSConfigs' configs, or ends the test.
func tlsConfigs(t testing.TB) (*tls.Config, *tls.Config) {
	server, client, err := services.TLSConfigs()
	require.NoError(t, err)
	return server, client
}

// goroutinesOf counts the goroutines whose stacks mention pkg.
func goroutinesOf(pkg string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, pkg) {
			count++
		}
	}
	return count
}

// requireGone waits until no goroutine mentions pkg.
func requireGone(t *testing.T, pkg string) {
	t.Helper()
	require.Eventually(t, func() bool { return goroutinesOf(pkg) == 0 }, 10*time.Second, 10*time.Millisecond,
		"goroutines of %s left: %d", pkg, goroutinesOf(pkg))
}

// quicEcho dials addr from a kernel socket of its own, sends echoSize
// random bytes on a stream and checks that the same bytes come back. It
// runs beside the test's goroutine, so it returns its error rather than
// fail the test itself.
func quicEcho(ctx context.Context, addr netip.AddrPort, clientTLS *tls.Config) (time.Duration, error) {
	start := time.Now()
	c, err := services.DialQUICEcho(ctx, netip.MustParseAddr("127.0.0.9"), addr, clientTLS)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	data := make([]byte, echoSize)
	_, _ = rand.Read(data)
	if err := c.Echo(ctx, data); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// dnsAsk queries addr with a miekg/dns client, whose connected socket
// takes only replies from addr, and returns the TXT answer.
func dnsAsk(t *testing.T, addr netip.AddrPort) string {
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	q := new(dns.Msg)
	q.SetQuestion("who.example.", dns.TypeTXT)
	r, _, err := c.Exchange(q, addr.String())
	require.NoError(t, err, "query to %v", addr)
	require.Len(t, r.Answer, 1)
	return r.Answer[0].(*dns.TXT).Txt[0]
}

// replySource sends a query to addr from an unconnected socket, which
// takes replies from anywhere, and returns where the reply came from.
func replySource(t *testing.T, addr netip.AddrPort) netip.AddrPort {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
	require.NoError(t, err)
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion("who.example.", dns.TypeTXT)
	b, err := q.Pack()
	require.NoError(t, err)
	_, err = c.WriteToUDPAddrPort(b, addr)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, from, err := c.ReadFromUDPAddrPort(make([]byte, 1500))
	require.NoError(t, err)
	return netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
}

// TestOnePort: on one kernel port at once, a quic-go server on one table
// socket echoes 16 MiB to a quic-go client; miekg/dns servers on two
// more, one of them bound to the wildcard address, answer miekg/dns
// clients from the address each queried; and a plain handler answers on
// a fourth. Then each server closes, and its goroutines end.
func TestOnePort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.Zero(t, goroutinesOf("udpdemux/demux/serve"), "a server of another test runs")

	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		r.Reply([]byte("plain:" + string(r.Payload)))
	}, serve.Options{ReadBuffer: 4 << 20})
	require.NoError(t, err)
	defer srv.Close()
	tbl := srv.Table()
	ip := netip.MustParseAddr

	// The plain handler's socket takes a port free in the kernel too.
	var plain *demux.Socket[string]
	for range 20 {
		plain, err = tbl.Bind(demux.Options{Addr: ip("127.0.0.4"), ReuseAddr: true}, "plain")
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	require.NoError(t, err)
	port := plain.LocalAddr().Port()
	listen := func(addr string) *serve.Conn {
		c, err := srv.ListenPacket(demux.Options{Addr: ip(addr), Port: port, ReuseAddr: true})
		require.NoError(t, err)
		return c
	}
	quicConn, dnsConn, wildConn := listen("127.0.0.2"), listen("127.0.0.6"), listen("0.0.0.0")

	serverTLS, clientTLS := tlsConfigs(t)
	qtr := &quic.Transport{Conn: quicConn}
	ln, err := qtr.Listen(serverTLS, &quic.Config{})
	require.NoError(t, err)
	qdone := make(chan struct{})
	go func() {
		defer close(qdone)
		services.QUICEchoServer(ctx, ln)
	}()

	var dnsServers []*dns.Server
	for _, s := range []struct {
		conn net.PacketConn
		name string
	}{{dnsConn, "specific"}, {wildConn, "wildcard"}} {
		started := make(chan struct{})
		ds := &dns.Server{PacketConn: s.conn, Handler: services.DNSAnswerer(s.name), NotifyStartedFunc: func() { close(started) }}
		go func() { _ = ds.ActivateAndServe() }()
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("dns server did not start")
		}
		dnsServers = append(dnsServers, ds)
	}

	// Everything at once: the echo, and queries to each server meanwhile.
	type echoResult struct {
		took time.Duration
		err  error
	}
	echoed := make(chan echoResult, 1)
	go func() {
		took, err := quicEcho(ctx, netip.AddrPortFrom(ip("127.0.0.2"), port), clientTLS)
		echoed <- echoResult{took, err}
	}()
	at := func(a string) netip.AddrPort { return netip.AddrPortFrom(ip(a), port) }
	plainClient, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(at("127.0.0.4")))
	require.NoError(t, err)
	defer plainClient.Close()
	for i := 0; ; i++ {
		assert.Equal(t, "specific", dnsAsk(t, at("127.0.0.6")))
		assert.Equal(t, "wildcard", dnsAsk(t, at("127.0.0.3")))
		assert.Equal(t, "wildcard", dnsAsk(t, at("127.0.0.1")))
		_, err := plainClient.Write([]byte("hi"))
		require.NoError(t, err)
		require.NoError(t, plainClient.SetReadDeadline(time.Now().Add(5*time.Second)))
		b := make([]byte, 64)
		n, err := plainClient.Read(b)
		require.NoError(t, err)
		assert.Equal(t, "plain:hi", string(b[:n]))
		if i == 0 {
			assert.Equal(t, at("127.0.0.3"), replySource(t, at("127.0.0.3")), "the wildcard server's reply source")
			assert.Equal(t, at("127.0.0.6"), replySource(t, at("127.0.0.6")))
		}
		select {
		case r := <-echoed:
			require.NoError(t, r.err, "the QUIC echo")
			t.Logf("16 MiB QUIC echo: %v; %d rounds of queries meanwhile", r.took, i+1)
			goto closing
		case <-ctx.Done():
			t.Fatal("the QUIC echo did not finish in time")
		default:
		}
	}
closing:
	st := srv.Stats()
	t.Logf("server: %+v", st)
	assert.Zero(t, st.Unmatched)
	assert.Zero(t, st.KernelDrops)

	// Close each server in turn; its goroutines end.
	require.NoError(t, ln.Close())
	require.NoError(t, qtr.Close())
	require.NoError(t, quicConn.Close())
	<-qdone
	requireGone(t, "quic-go/quic-go")
	for _, ds := range dnsServers {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		require.NoError(t, ds.ShutdownContext(sctx))
		scancel()
	}
	requireGone(t, "miekg/dns")
	_, _, err = dnsConn.ReadFrom(make([]byte, 1))
	assert.ErrorIs(t, err, net.ErrClosed, "miekg/dns closed its PacketConn")
	require.NoError(t, srv.Close())
	requireGone(t, "udpdemux/demux/serve")
	assert.Zero(t, tbl.Len(), "Close closed every socket")
}
