package interop_test

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
	"github.com/udpdemux/udpdemux/interop/services"
)

// The benchmarks run the same server over a kernel *net.UDPConn and over
// a Conn, side by side: go test -bench . -benchtime 10x compares them.

// serverConn returns a PacketConn on 127.0.0.2 of the kind named, its
// address, and a function that reports the kernel's drops and closes it.
func serverConn(b *testing.B, kind string) (net.PacketConn, netip.AddrPort, func() uint64) {
	ip := netip.MustParseAddr("127.0.0.2")
	if kind == "kernel" {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		if err != nil {
			b.Fatal(err)
		}
		return c, c.LocalAddr().(*net.UDPAddr).AddrPort(), func() uint64 { _ = c.Close(); return 0 }
	}
	srv, err := serve.New[string](demux.Config{}, nil, serve.Options{ReadBuffer: 4 << 20})
	if err != nil {
		b.Fatal(err)
	}
	for range 20 {
		c, err := srv.ListenPacket(demux.Options{Addr: ip})
		if errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		return c, c.LocalAddr().(*net.UDPAddr).AddrPort(), func() uint64 {
			st := srv.Stats()
			_ = srv.Close()
			return st.KernelDrops + st.ConnDrops
		}
	}
	b.Fatal("no free port")
	return nil, netip.AddrPort{}, nil
}

// BenchmarkQUICEcho echoes 16 MiB on a quic-go stream per iteration, the
// server on a kernel socket or on a Conn.
func BenchmarkQUICEcho(b *testing.B) {
	for _, kind := range []string{"kernel", "conn"} {
		b.Run(kind, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			pc, addr, done := serverConn(b, kind)
			serverTLS, clientTLS := tlsConfigs(b)
			tr := &quic.Transport{Conn: pc}
			ln, err := tr.Listen(serverTLS, &quic.Config{})
			if err != nil {
				b.Fatal(err)
			}
			go services.QUICEchoServer(ctx, ln)
			udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
			if err != nil {
				b.Fatal(err)
			}
			ctr := &quic.Transport{Conn: udp}
			conn, err := ctr.Dial(ctx, net.UDPAddrFromAddrPort(addr), clientTLS, &quic.Config{})
			if err != nil {
				b.Fatal(err)
			}
			data := make([]byte, echoSize)
			_, _ = rand.Read(data)
			b.SetBytes(echoSize)
			b.ResetTimer()
			for range b.N {
				st, err := conn.OpenStreamSync(ctx)
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					_, _ = st.Write(data)
					_ = st.Close()
				}()
				n, err := io.Copy(io.Discard, st)
				if err != nil || n != echoSize {
					b.Fatalf("echoed %d bytes: %v", n, err)
				}
			}
			b.StopTimer()
			_ = conn.CloseWithError(0, "")
			_ = ctr.Close()
			_ = udp.Close()
			_ = ln.Close()
			_ = tr.Close()
			b.ReportMetric(float64(done()), "drops")
		})
	}
}

// BenchmarkDNS answers miekg/dns queries from parallel clients, the
// server on a kernel socket or on a Conn; it reports queries per second.
func BenchmarkDNS(b *testing.B) {
	for _, kind := range []string{"kernel", "conn"} {
		b.Run(kind, func(b *testing.B) {
			pc, addr, done := serverConn(b, kind)
			started := make(chan struct{})
			ds := &dns.Server{PacketConn: pc, Handler: services.DNSAnswerer(kind), NotifyStartedFunc: func() { close(started) }}
			go func() { _ = ds.ActivateAndServe() }()
			<-started
			q := new(dns.Msg)
			q.SetQuestion("who.example.", dns.TypeTXT)
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(addr))
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				co := &dns.Conn{Conn: c}
				for pb.Next() {
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					if err := co.WriteMsg(q); err != nil {
						b.Error(err)
						return
					}
					if _, err := co.ReadMsg(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "queries/s")
			b.StopTimer()
			_ = ds.Shutdown()
			b.ReportMetric(float64(done()), "drops")
		})
	}
}
