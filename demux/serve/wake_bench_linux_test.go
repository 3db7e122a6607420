package serve_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// BenchmarkWake measures a round trip through an idle reader (one op): a
// client sends a datagram, the port's reader wakes, handles it, replies,
// and finds its socket empty again, and the client reads the reply. It is
// the path that BenchmarkReceive leaves out: the reader's wait in the
// poller, and its taking a batch on waking and giving it back when idle.
func BenchmarkWake(b *testing.B) {
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) { _ = r.Reply(r.Payload) }, serve.Options{IPv4Only: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	sk, err := srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.1")}, "s")
	if err != nil {
		b.Fatal(err)
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), sk.Options().Port)
	p, buf := []byte("ping"), make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.WriteToUDPAddrPort(p, dst); err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
			b.Fatal(err)
		}
	}
}
