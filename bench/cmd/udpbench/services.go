package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
	"github.com/udpdemux/udpdemux/interop/services"
)

// The services scenario runs software that nobody in this project wrote,
// unmodified, on a demux/serve Conn and on kernel sockets, in turn within
// each round: a quic-go echo, and miekg/dns servers under a load of
// miekg/dns clients.

// The services scenario's sizes.
var (
	// svcEcho is the bytes a QUIC echo sends and reads back.
	svcEcho = byRun[int]{16 << 20, 16 << 20}
	// svcEchoes is how many echoes one QUIC measurement times, on one
	// connection: one echo of 16 MiB is long enough to time, but the
	// machine's neighbours move single ones by a large fraction.
	svcEchoes = byRun[int]{1, 5}
	// svcDNSTime is how long one DNS measurement runs.
	svcDNSTime = byRun[time.Duration]{500 * time.Millisecond, 3 * time.Second}
)

// svcClients is how many DNS clients run at once, each with one query in
// flight.
const svcClients = 4

// The sides of the services scenario, and its figures' shapes.
const (
	svcKernel = "kernel sockets"
	svcConn   = "serve.Conn"
	svcQUIC   = "quic-echo"
	svcDNS    = "dns"
)

// svcReadBuffer is the receive buffer of every kernel socket of the
// scenario, both sides alike: the default loses QUIC datagrams.
const svcReadBuffer = 4 << 20

// udpRcvbufErrors returns the host's count of UDP datagrams dropped for a
// full receive buffer (/proc/net/snmp), or -1 where it cannot be read.
func udpRcvbufErrors() int64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return -1
	}
	var head []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		if i := slices.Index(head, "RcvbufErrors"); i > 0 && i < len(f) {
			n, err := strconv.ParseInt(f[i], 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// svcSide is one side's servers: their PacketConns, and a close that
// returns the datagrams that side itself dropped (a Conn's queue).
type svcSide struct {
	conns []net.PacketConn
	addrs []netip.AddrPort
	close func() uint64
}

// kernelSide opens kernel sockets on the addresses, one port for all
// (SO_REUSEADDR, so that a wildcard and a specific one share it).
func kernelSide(addrs []netip.Addr) (*svcSide, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			if serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, svcReadBuffer)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	s := &svcSide{}
	s.close = func() uint64 {
		for _, c := range s.conns {
			_ = c.Close()
		}
		return 0
	}
	var port uint16
	for _, a := range addrs {
		c, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(a, port).String())
		if err != nil {
			s.close()
			return nil, err
		}
		port = c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		s.conns = append(s.conns, c)
		s.addrs = append(s.addrs, netip.AddrPortFrom(a, port))
	}
	return s, nil
}

// connSide binds table sockets on the addresses, one port for all, and
// returns their Conns.
func connSide(addrs []netip.Addr) (*svcSide, error) {
	srv, err := serve.New[string](demux.Config{}, nil, serve.Options{ReadBuffer: svcReadBuffer})
	if err != nil {
		return nil, err
	}
	s := &svcSide{close: func() uint64 {
		st := srv.Stats()
		_ = srv.Close()
		return st.ConnDrops
	}}
	var port uint16
	for _, a := range addrs {
		c, err := srv.ListenPacket(demux.Options{Addr: a, Port: port, ReuseAddr: true})
		if err != nil {
			s.close()
			return nil, err
		}
		port = c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		s.conns = append(s.conns, c)
		s.addrs = append(s.addrs, netip.AddrPortFrom(a, port))
	}
	return s, nil
}

// svcOpen opens one side.
func svcOpen(side string, addrs []netip.Addr) (*svcSide, error) {
	if side == svcKernel {
		return kernelSide(addrs)
	}
	return connSide(addrs)
}

// quicEchoOn times echoes of data through a quic-go server on a side's
// first PacketConn, one connection for all, the handshake left out, and
// returns the time with the host's receive-buffer drops meanwhile and the
// side's own.
func quicEchoOn(side string, data []byte, echoes int) (time.Duration, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := svcOpen(side, []netip.Addr{netip.MustParseAddr("127.0.0.2")})
	if err != nil {
		return 0, 0, err
	}
	serverTLS, clientTLS, err := services.TLSConfigs()
	if err != nil {
		s.close()
		return 0, 0, err
	}
	tr := &quic.Transport{Conn: s.conns[0]}
	ln, err := tr.Listen(serverTLS, &quic.Config{})
	if err != nil {
		s.close()
		return 0, 0, err
	}
	go services.QUICEchoServer(ctx, ln)
	c, err := services.DialQUICEcho(ctx, netip.MustParseAddr("127.0.0.9"), s.addrs[0], clientTLS)
	var took time.Duration
	drops0 := udpRcvbufErrors()
	if err == nil {
		start := time.Now()
		for i := 0; i < echoes && err == nil; i++ {
			err = c.Echo(ctx, data)
		}
		took = time.Since(start)
		c.Close()
	}
	drops := udpRcvbufErrors() - drops0
	if drops0 < 0 {
		drops = 0
	}
	_ = ln.Close()
	_ = tr.Close()
	return took, drops + int64(s.close()), err
}

// dnsLoadOn runs the DNS load against a side's two servers on one port:
// one on 127.0.0.2, and one on the wildcard address queried at
// 127.0.0.3, each naming itself in its answers.
func dnsLoadOn(side string, d time.Duration) (services.DNSLoad, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	s, err := svcOpen(side, []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.IPv4Unspecified()})
	if err != nil {
		return services.DNSLoad{}, err
	}
	defer s.close()
	names := []string{"specific", "wildcard"}
	var targets []services.DNSTarget
	for i, pc := range s.conns {
		ds, err := services.ServeDNS(ctx, pc, names[i])
		if err != nil {
			return services.DNSLoad{}, err
		}
		defer ds.Shutdown()
		addr := s.addrs[i]
		if addr.Addr().IsUnspecified() {
			addr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), addr.Port())
		}
		targets = append(targets, services.DNSTarget{Addr: addr, Name: names[i]})
	}
	return services.DNSLoadFor(ctx, targets, svcClients, d, 5*time.Second)
}

func (r *runner) services() {
	// quic-go notes once that it cannot size the buffers of a PacketConn
	// that is not a *net.UDPConn; a Conn's kernel socket is sized above.
	_ = os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	echo, echoes := svcEcho.at(r.c.quick), svcEchoes.at(r.c.quick)
	d := svcDNSTime.at(r.c.quick)
	r.printf("quic-go and miekg/dns, unmodified, each on kernel sockets and on `demux/serve` Conns (one `serve.Server`, "+
		"table sockets of the default Config), in turn within each of %s, the side that goes first alternating. "+
		"*QUIC echo*: a quic-go client echoes %s of random bytes on a stream through a quic-go server on 127.0.0.2, %s "+
		"on one connection, the handshake left out; every kernel socket of both sides has a %s receive buffer; *drops* counts the host's UDP "+
		"receive-buffer drops during the echo, and a Conn's own queue drops. *DNS*: %d miekg/dns clients, each with one "+
		"query in flight, for %s, half to a miekg/dns server on 127.0.0.2 and half to one on the wildcard address "+
		"queried at 127.0.0.3, both on one port; each server names itself in its answer, and *wrong* counts the answers "+
		"from the other server.\n\n",
		rounds(r.c.runs), fmtBytes(float64(echo)), times(echoes), fmtBytes(svcReadBuffer), svcClients, d)
	data := make([]byte, echo)
	_, _ = rand.Read(data)
	sides := []string{svcKernel, svcConn}
	echoMBs := map[string][]float64{}
	dnsQPS := map[string][]float64{}
	var drops, wrong [2]float64
	for round := range r.c.runs {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			took, dr, err := quicEchoOn(sides[i], data, echoes)
			if err != nil {
				r.fail("services: QUIC echo on %s: %v", sides[i], err)
				return
			}
			echoMBs[sides[i]] = append(echoMBs[sides[i]], float64(echo*echoes)/took.Seconds())
			drops[i] += float64(dr)
		}
		for _, i := range order {
			load, err := dnsLoadOn(sides[i], d)
			if err != nil {
				r.fail("services: DNS on %s: %v", sides[i], err)
				return
			}
			dnsQPS[sides[i]] = append(dnsQPS[sides[i]], load.Rate())
			wrong[i] += float64(load.Wrong)
		}
	}
	t := newTable("service", svcKernel, svcConn, "Conn ÷ kernel", "drops (kernel, Conn)", "wrong (kernel, Conn)")
	qk, qc := median(echoMBs[svcKernel]), median(echoMBs[svcConn])
	dk, dc := median(dnsQPS[svcKernel]), median(dnsQPS[svcConn])
	t.add("QUIC echo, bytes/s", fmtRate(qk), fmtRate(qc), fmtX(qc/qk), fmt.Sprintf("%.0f, %.0f", drops[0], drops[1]), "—")
	t.add("DNS, answers/s", fmtRate(dk), fmtRate(dc), fmtX(dc/dk), "—", fmt.Sprintf("%.0f, %.0f", wrong[0], wrong[1]))
	r.set(key{scen: scServices, shape: svcQUIC, m: ratioX}, qc/qk)
	r.set(key{scen: scServices, shape: svcDNS, m: ratioX}, dc/dk)
	r.set(key{scen: scServices, shape: svcQUIC, target: svcConn, m: wrongCount}, drops[1])
	r.set(key{scen: scServices, shape: svcDNS, target: svcConn, m: wrongCount}, wrong[1])
	r.printf("%s\nMedians of the rounds (higher is better). quic-go takes its fast paths (GSO, batched reads) only "+
		"through `SyscallConn`, which a Conn cannot offer without exposing the port's shared kernel socket "+
		"(`demux/serve`'s documentation of `Conn`): through a Conn it writes one datagram a call, and the Conn's "+
		"writer sends runs of them to one peer batched and segmented (sendmmsg, UDP_SEGMENT).\n\n", t)
}

func (r *runner) servicesGoals() []goal {
	q := r.val(key{scen: scServices, shape: svcQUIC, m: ratioX})
	dn := r.val(key{scen: scServices, shape: svcDNS, m: ratioX})
	drops := r.val(key{scen: scServices, shape: svcQUIC, target: svcConn, m: wrongCount})
	wrong := r.val(key{scen: scServices, shape: svcDNS, target: svcConn, m: wrongCount})
	count := func(x float64) string { return fmt.Sprintf("%.0f", x) }
	return []goal{
		limit("Services: a quic-go 16 MiB echo through a serve.Conn at least 0.9× as fast as through a kernel *net.UDPConn",
			[]place{{"", q}}, false, 0.9, fmtX),
		limit("Services: no datagram of the QUIC echo through a serve.Conn dropped", []place{{"", drops}}, true, 0, count),
		limit("Services: miekg/dns answers at least 0.9× the queries per second through serve.Conns as on kernel sockets",
			[]place{{"", dn}}, false, 0.9, fmtX),
		limit("Services: 0 datagrams to a wrong Conn (DNS answers from the other server)", []place{{"", wrong}}, true, 0, count),
	}
}
