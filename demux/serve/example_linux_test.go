package serve_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// A DNS-like responder on several loopback addresses of one port: a server
// of its own on 127.0.0.1, an SO_REUSEPORT group of two on 127.0.0.2, a
// fallback on every other address, and a socket connected to one client.
// Each answer says which socket answered, and comes from the address the
// client asked.
func Example() {
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		r.Reply([]byte(r.Value + " answers " + string(r.Payload)))
	}, serve.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	t := srv.Table()
	ip := netip.MustParseAddr

	// Sockets share the port with SO_REUSEADDR, as on Linux. The first
	// takes a free port (bind(0)); a port that another program holds on
	// the host vetoes the bind, so try again.
	var ns1 *demux.Socket[string]
	for ns1 == nil {
		ns1, err = t.Bind(demux.Options{Addr: ip("127.0.0.1"), ReuseAddr: true}, "ns1")
		if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
			panic(err)
		}
	}
	port := ns1.LocalAddr().Port()
	must := func(s *demux.Socket[string], err error) *demux.Socket[string] {
		if err != nil {
			panic(err)
		}
		return s
	}
	for _, name := range []string{"ns2-a", "ns2-b"} {
		must(t.Bind(demux.Options{Addr: ip("127.0.0.2"), Port: port, ReusePort: true, ReuseAddr: true}, name))
	}
	must(t.Bind(demux.Options{Addr: ip("0.0.0.0"), Port: port, ReuseAddr: true}, "fallback"))

	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	session := must(t.Bind(demux.Options{Addr: ip("0.0.0.0"), Port: port, ReuseAddr: true}, "session"))
	if err := t.Connect(session, client.LocalAddr().(*net.UDPAddr).AddrPort(), ip("127.0.0.4")); err != nil {
		panic(err)
	}

	buf := make([]byte, 512)
	for _, to := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		dst := netip.AddrPortFrom(ip(to), port)
		if _, err := client.WriteToUDPAddrPort([]byte("example.org?"), dst); err != nil {
			panic(err)
		}
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := client.ReadFromUDPAddrPort(buf)
		if err != nil {
			panic(err)
		}
		// Which member of the group answers depends on the flow hash.
		answer := strings.Replace(string(buf[:n]), "ns2-a", "ns2-?", 1)
		answer = strings.Replace(answer, "ns2-b", "ns2-?", 1)
		fmt.Printf("%s: %s (from %v)\n", to, answer, from.Addr())
	}
	// Output:
	// 127.0.0.1: ns1 answers example.org? (from 127.0.0.1)
	// 127.0.0.2: ns2-? answers example.org? (from 127.0.0.2)
	// 127.0.0.3: fallback answers example.org? (from 127.0.0.3)
	// 127.0.0.4: session answers example.org? (from 127.0.0.4)
}

// An existing net.PacketConn service, here a plain echo loop, on a table
// socket: ListenPacket takes the place of net.ListenPacket. A second
// service shares the port on another address, and each one's replies
// come from the address it was asked on.
func ExampleServer_ListenPacket() {
	srv, err := serve.New[string](demux.Config{}, nil, serve.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	// The first bind takes a free port; a port that another program holds
	// on the host vetoes the bind, so try again.
	var a *serve.Conn
	for a == nil {
		a, err = srv.ListenPacket(demux.Options{Addr: netip.MustParseAddr("127.0.0.2"), ReuseAddr: true})
		if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
			panic(err)
		}
	}
	port := a.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	b, err := srv.ListenPacket(demux.Options{Addr: netip.MustParseAddr("0.0.0.0"), Port: port, ReuseAddr: true})
	if err != nil {
		panic(err)
	}
	for name, pc := range map[string]net.PacketConn{"a": a, "b": b} {
		go func() { // the service, unchanged: it sees a net.PacketConn
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return // net.ErrClosed when the server closes
				}
				_, _ = pc.WriteTo(append([]byte(name+": "), buf[:n]...), from)
			}
		}()
	}

	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	buf := make([]byte, 512)
	for _, to := range []string{"127.0.0.2", "127.0.0.3"} {
		if _, err := client.WriteToUDPAddrPort([]byte("hello"), netip.AddrPortFrom(netip.MustParseAddr(to), port)); err != nil {
			panic(err)
		}
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := client.ReadFromUDPAddrPort(buf)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s (from %v)\n", buf[:n], from.Addr())
	}
	// Output:
	// a: hello (from 127.0.0.2)
	// b: hello (from 127.0.0.3)
}

// A socket already bound in the table gets a Conn, and its datagrams go
// to the Conn instead of the handler; closing the socket through the
// table ends the Conn's reads with net.ErrClosed.
func ExampleServer_SocketConn() {
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		r.Reply([]byte("handler"))
	}, serve.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	var s *demux.Socket[string]
	for s == nil {
		s, err = srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2")}, "s")
		if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
			panic(err)
		}
	}
	c, err := srv.SocketConn(s)
	if err != nil {
		panic(err)
	}
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	if _, err := client.WriteToUDPAddrPort([]byte("for the Conn"), s.LocalAddr()); err != nil {
		panic(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, _, err := c.ReadFrom(buf)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(buf[:n]))
	_ = c.SetReadDeadline(time.Time{})
	_ = srv.Table().Close(s)
	_, _, err = c.ReadFrom(buf)
	fmt.Println(errors.Is(err, net.ErrClosed))
	// Output:
	// for the Conn
	// true
}
