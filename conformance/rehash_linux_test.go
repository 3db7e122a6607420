//go:build linux

package conformance

import (
	"errors"
	"fmt"
	"github.com/udpdemux/udpdemux/internal/osthread"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// The kernel checks of this file cover what happens to a bound socket after
// bind: disconnect (connect with AF_UNSPEC), SO_BINDTODEVICE after bind,
// and bind's local-address check. Each scenario runs on real sockets in a
// private network namespace and on the table (every configuration); after
// every step the two must agree on each socket's local address and on who
// receives each datagram, and the kernel must give the outcome the scenario
// states.

const (
	ipTransparent   = 19 // IP_TRANSPARENT
	ipv6Transparent = 75 // IPV6_TRANSPARENT
)

// rnet is the namespace of these checks: lo, and a veth pair whose d0 end
// holds 10.9.0.1/24, 2001:db8::1/64 and fe80::1/64.
type rnet struct {
	th       *osthread.Thread
	lo, d0   int // interface indexes
	sentRx   int
	sentTx   int
	sentAddr netip.AddrPort
}

// setupRnet makes the namespace. A bare one has no address but lo's
// 127.0.0.1/8, and routes 10.0.0.0/24 and 2001:db8::/64 to d0, which has
// none: routing finds no source address for them.
func setupRnet(bare bool) (*rnet, error) {
	th, err := startThread(true)
	if err != nil {
		return nil, err
	}
	n := &rnet{th: th}
	th.Do(func() { err = n.setup(bare) })
	if err != nil {
		th.Stop()
		return nil, err
	}
	return n, nil
}

func (n *rnet) setup(bare bool) error {
	cmds := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "d0", "type", "veth", "peer", "name", "d1"},
		{"link", "set", "d0", "up"},
		{"link", "set", "d1", "up"},
		{"addr", "add", "10.9.0.1/24", "brd", "+", "dev", "d0"},
		{"-6", "addr", "add", "2001:db8::1/64", "dev", "d0", "nodad"},
		{"-6", "addr", "add", "fe80::1/64", "dev", "d0", "nodad"},
	}
	if bare {
		cmds = [][]string{
			{"link", "set", "lo", "up"},
			{"-6", "addr", "del", "::1/128", "dev", "lo"},
			{"link", "add", "d0", "type", "veth", "peer", "name", "d1"},
			{"link", "set", "d0", "addrgenmode", "none"},
			{"link", "set", "d1", "addrgenmode", "none"},
			{"link", "set", "d0", "up"},
			{"link", "set", "d1", "up"},
			{"route", "add", "10.0.0.0/24", "dev", "d0"},
			{"-6", "route", "add", "2001:db8::/64", "dev", "d0"},
		}
	}
	for _, args := range cmds {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	for name, p := range map[string]*int{"lo": &n.lo, "d0": &n.d0} {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		*p = ifc.Index
	}
	var err error
	if n.sentRx, err = socket(false, 0); err != nil {
		return err
	}
	if err := syscall.Bind(n.sentRx, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	tv := syscall.Timeval{Sec: 1}
	if err := syscall.SetsockoptTimeval(n.sentRx, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	n.sentAddr = sockname(n.sentRx)
	n.sentTx, err = socket(false, 0)
	return err
}

func ipCmd(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// isLocal answers Config.IsLocal from the namespace's interfaces: their
// addresses, the IPv4 broadcast address of each prefix, and all of 127/8;
// link-local and loopback addresses only on their own interface. It runs
// on the namespace's thread.
func (n *rnet) isLocal() (func(netip.Addr, int) bool, error) {
	type local struct {
		addr netip.Addr
		dev  int
	}
	var ls []local
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, ifc := range ifs {
		as, err := ifc.Addrs()
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				return nil, err
			}
			ls = append(ls, local{p.Addr(), ifc.Index})
			if p.Addr().Is4() && p.Bits() < 31 {
				b := p.Masked().Addr().As4()
				for i := p.Bits(); i < 32; i++ {
					b[i/8] |= 0x80 >> (i % 8)
				}
				ls = append(ls, local{netip.AddrFrom4(b), ifc.Index})
			}
		}
	}
	lo := netip.MustParsePrefix("127.0.0.0/8")
	return func(a netip.Addr, dev int) bool {
		if lo.Contains(a) {
			return true
		}
		for _, l := range ls {
			scoped := l.addr.Is6() && (l.addr.IsLinkLocalUnicast() || l.addr.IsLoopback())
			if l.addr == a && (!scoped || dev == 0 || dev == l.dev) {
				return true
			}
		}
		return false
	}, nil
}

func (n *rnet) close() {
	n.th.Do(func() {
		syscall.Close(n.sentRx)
		syscall.Close(n.sentTx)
	})
	n.th.Stop()
}

// rstep is one step of a scenario. Devices are named: "lo", "d0" or "".
type rstep struct {
	op   string // bind, connect, disconnect, setdev, send, ip
	sock string // the socket's name
	bind demux.Options
	dev  string
	peer string   // connect: the remote; send: the source
	dst  string   // send: the destination
	want string   // bind, connect: "ok" or an errno name; send: the receiver or "none"
	args []string // ip: the command's arguments
}

type rscenario struct {
	name  string
	steps []rstep
}

func rb(name, addr string, port uint16, opts ...string) rstep {
	o := demux.Options{Addr: netip.MustParseAddr(addr), Port: port}
	dev := ""
	for _, w := range opts {
		switch w {
		case "reuseaddr":
			o.ReuseAddr = true
		case "v6only":
			o.V6Only = true
		case "lo", "d0":
			dev = w
		default:
			panic(w)
		}
	}
	return rstep{op: "bind", sock: name, bind: o, dev: dev, want: "ok"}
}

func rc(name, peer string) rstep                  { return rstep{op: "connect", sock: name, peer: peer, want: "ok"} }
func rip(args ...string) rstep                    { return rstep{op: "ip", args: args} }
func rd(name string) rstep                        { return rstep{op: "disconnect", sock: name} }
func rdev(name, dev string) rstep                 { return rstep{op: "setdev", sock: name, dev: dev} }
func rs(src, dst, want string) rstep              { return rstep{op: "send", peer: src, dst: dst, want: want} }
func rbErr(s rstep, errno string) rstep           { s.want = errno; return s }
func rscen(name string, steps ...rstep) rscenario { return rscenario{name, steps} }

// rehashScenarios are the behaviours checked, each first seen with a probe
// on Linux 6.18.
var rehashScenarios = []rscenario{
	rscen("disconnect: a wildcard gets its address back",
		rb("a", "0.0.0.0", 5000), rc("a", "127.0.0.1:6000"),
		rs("127.0.0.2:7000", "127.0.0.3:5000", "none"),
		rd("a"), rs("127.0.0.2:7000", "127.0.0.3:5000", "a")),
	rscen("disconnect: a dual-stack wildcard drops the placeholder",
		rb("a", "::", 5003), rc("a", "[::1]:6000"),
		rs("127.0.0.2:7000", "127.0.0.3:5003", "none"),
		rd("a"), rs("127.0.0.2:7000", "127.0.0.3:5003", "a"), rs("[::1]:7001", "[::1]:5003", "a")),
	rscen("disconnect: ::ffff:0.0.0.0 keeps its source",
		rb("a", "::ffff:0.0.0.0", 5070), rc("a", "[::ffff:127.0.0.1]:6000"), rd("a"),
		rs("127.0.0.2:7000", "127.0.0.1:5070", "a"), rs("127.0.0.2:7000", "127.0.0.3:5070", "none")),
	rscen("disconnect: a rehashed wildcard is the newest",
		rb("a", "0.0.0.0", 5040, "reuseaddr"), rb("b", "0.0.0.0", 5040, "reuseaddr"),
		rc("a", "127.0.0.1:6000"), rb("c", "0.0.0.0", 5040, "reuseaddr"),
		rs("127.0.0.1:7000", "127.0.0.1:5040", "c"),
		rd("a"), rs("127.0.0.1:7000", "127.0.0.1:5040", "a")),
	rscen("disconnect: a specific socket keeps its place",
		rb("a", "127.0.0.1", 5041, "reuseaddr"), rb("b", "127.0.0.1", 5041, "reuseaddr"),
		rc("a", "127.0.0.1:6000"), rd("a"), rs("127.0.0.1:7000", "127.0.0.1:5041", "b")),
	rscen("disconnect: a specific socket keeps its first 4-tuple",
		rb("a", "127.0.0.1", 5010, "reuseaddr"), rb("b", "127.0.0.1", 5010, "reuseaddr"),
		rc("a", "127.0.0.1:6000"), rc("b", "127.0.0.1:6000"), rs("127.0.0.1:6000", "127.0.0.1:5010", "b"),
		rd("a"), rs("127.0.0.1:6000", "127.0.0.1:5010", "b"),
		rc("a", "127.0.0.1:6000"), rs("127.0.0.1:6000", "127.0.0.1:5010", "b")),
	rscen("disconnect: a wildcard's next connect is a first connect",
		rb("a", "0.0.0.0", 5011, "reuseaddr"), rb("b", "0.0.0.0", 5011, "reuseaddr"),
		rc("a", "127.0.0.1:6000"), rc("b", "127.0.0.1:6000"), rs("127.0.0.1:6000", "127.0.0.1:5011", "b"),
		rd("a"), rs("127.0.0.1:6000", "127.0.0.1:5011", "b"),
		rc("a", "127.0.0.1:6000"), rs("127.0.0.1:6000", "127.0.0.1:5011", "a")),
	rscen("disconnect: the device is unbound",
		rb("a", "0.0.0.0", 5060, "d0"), rs("127.0.0.1:7000", "127.0.0.1:5060", "none"),
		rd("a"), rs("127.0.0.1:7000", "127.0.0.1:5060", "a")),
	rscen("disconnect: a link-local socket loses its zone's device",
		rb("a", "fe80::1%d0", 5030), rc("a", "[fe80::2%d0]:6000"), rd("a")),
	rscen("setdev: delivery follows the device",
		rb("a", "0.0.0.0", 5300), rdev("a", "d0"), rs("127.0.0.1:7000", "127.0.0.1:5300", "none"),
		rdev("a", ""), rs("127.0.0.1:7000", "127.0.0.1:5300", "a")),
	rscen("setdev: the socket keeps its place",
		rb("a", "0.0.0.0", 5301, "reuseaddr"), rb("b", "0.0.0.0", 5301, "reuseaddr"),
		rdev("b", "lo"), rdev("a", "lo"), rs("127.0.0.1:7000", "127.0.0.1:5301", "b")),
	rscen("setdev: a connected socket keeps its peer",
		rb("a", "0.0.0.0", 5701), rc("a", "127.0.0.1:7000"), rdev("a", "d0"),
		rs("127.0.0.1:7000", "127.0.0.1:5701", "none"), rdev("a", "lo"), rs("127.0.0.1:7000", "127.0.0.1:5701", "a")),
	rscen("setdev: no conflict check; later binds see the device",
		rb("a", "0.0.0.0", 5302, "d0"), rb("b", "0.0.0.0", 5302, "lo"), rdev("a", "lo"),
		rb("c", "0.0.0.0", 5302, "d0"), rbErr(rb("d", "0.0.0.0", 5302), "EADDRINUSE")),
	rscen("setdev: the 4-tuple entry moves to the current peer, as the newest",
		rb("a", "127.0.0.1", 5702, "reuseaddr"), rc("a", "127.0.0.1:6000"),
		rb("b", "127.0.0.1", 5702, "reuseaddr"), rc("b", "127.0.0.1:6001"), rc("b", "127.0.0.1:6000"),
		rs("127.0.0.1:6000", "127.0.0.1:5702", "a"),
		rdev("b", ""), rs("127.0.0.1:6000", "127.0.0.1:5702", "b")),
	rscen("setdev: the entry of a disconnected socket moves to no peer, for good",
		rb("a", "127.0.0.1", 5703, "reuseaddr"), rc("a", "127.0.0.1:6000"),
		rb("b", "127.0.0.1", 5703, "reuseaddr"), rc("b", "127.0.0.1:6000"),
		rs("127.0.0.1:6000", "127.0.0.1:5703", "b"),
		rd("b"), rs("127.0.0.1:6000", "127.0.0.1:5703", "a"),
		rdev("b", ""), rc("b", "127.0.0.1:6000"), rs("127.0.0.1:6000", "127.0.0.1:5703", "a")),
	rscen("setdev: without it, a reconnect regains the entry",
		rb("a", "127.0.0.1", 5704, "reuseaddr"), rc("a", "127.0.0.1:6000"),
		rb("b", "127.0.0.1", 5704, "reuseaddr"), rc("b", "127.0.0.1:6000"),
		rd("b"), rc("b", "127.0.0.1:6000"), rs("127.0.0.1:6000", "127.0.0.1:5704", "b")),
	rscen("setdev: an IPv6 entry moves too",
		rb("a", "::1", 5705, "reuseaddr"), rc("a", "[::1]:6000"),
		rb("b", "::1", 5705, "reuseaddr"), rc("b", "[::1]:6001"), rc("b", "[::1]:6000"),
		rs("[::1]:6000", "[::1]:5705", "a"),
		rdev("b", "lo"), rs("[::1]:6000", "[::1]:5705", "b")),
	rscen("setdev: a link-local socket may leave its zone's device",
		rb("a", "fe80::1%d0", 5700), rdev("a", "lo"), rdev("a", "")),
}

// bareScenarios run in a bare namespace (see setupRnet), where routing
// finds no source address for 10.0.0.0/24 or for IPv6 peers: a connect to
// them keeps the wildcard, or fails. Each runs in a namespace of its own.
var bareScenarios = []rscenario{
	rscen("connect without a source keeps the wildcard",
		rb("a", "0.0.0.0", 5100, "reuseaddr"), rc("a", "10.0.0.2:6000"),
		rs("10.0.0.2:6000", "127.0.0.1:5100", "a"), rs("10.0.0.3:6000", "127.0.0.1:5100", "none"),
		rb("w", "0.0.0.0", 5100, "reuseaddr"),
		rs("10.0.0.2:6000", "127.0.0.1:5100", "a"), rs("10.0.0.3:6000", "127.0.0.1:5100", "w"),
		rb("x", "127.0.0.1", 5100, "reuseaddr"), rs("10.0.0.2:6000", "127.0.0.1:5100", "x")),
	rscen("connect without a source does not rehash",
		rb("a", "0.0.0.0", 5101, "reuseaddr"), rb("w", "0.0.0.0", 5101, "reuseaddr"),
		rc("w", "10.0.0.2:6000"), rc("a", "10.0.0.2:6000"), rs("10.0.0.2:6000", "127.0.0.1:5101", "w"),
		rb("b1", "::", 5104, "reuseaddr"), rb("b2", "::", 5104, "reuseaddr"),
		rc("b2", "[::ffff:10.0.0.2]:6000"), rc("b1", "[::ffff:10.0.0.2]:6000"),
		rs("10.0.0.2:6000", "127.0.0.1:5104", "b2")),
	rscen("a dual-stack socket keeps ::ffff:0.0.0.0, then cannot reach IPv6",
		rb("b", "::", 5102), rc("b", "[::ffff:10.0.0.2]:6000"), rs("10.0.0.2:6000", "127.0.0.1:5102", "b"),
		rcErr(rc("b", "[2001:db8::2]:6000"), "EAFNOSUPPORT"), rd("b")),
	rscen("no IPv6 source: EADDRNOTAVAIL",
		rb("c", "::", 5103, "v6only"), rcErr(rc("c", "[2001:db8::2]:6000"), "EADDRNOTAVAIL")),
	rscen("the first connect with an address is the first connect",
		rb("d", "0.0.0.0", 5200, "reuseaddr"), rc("d", "10.0.0.2:6000"),
		rip("addr", "add", "10.0.0.9/32", "dev", "lo"), rip("route", "replace", "10.0.0.0/24", "dev", "d0", "src", "10.0.0.9"),
		rb("e", "10.0.0.9", 5200, "reuseaddr", "lo"), rc("e", "10.0.0.2:6000"),
		rs("10.0.0.2:6000", "10.0.0.9:5200", "e"),
		rc("d", "10.0.0.2:6000"), rs("10.0.0.2:6000", "10.0.0.9:5200", "d")),
}

func rcErr(s rstep, errno string) rstep { s.want = errno; return s }

// localScenario binds each address once, without IP_FREEBIND; the kernel's
// answers are the scenario's.
func localScenario() rscenario {
	var steps []rstep
	for i, c := range []struct{ addr, dev, want string }{
		{"0.0.0.0", "", "ok"}, {"127.0.0.1", "", "ok"}, {"127.1.2.3", "", "ok"}, {"127.255.255.255", "", "ok"},
		{"10.9.0.1", "", "ok"}, {"10.9.0.1", "lo", "ok"}, {"10.9.0.2", "", "EADDRNOTAVAIL"},
		{"10.9.0.255", "", "ok"}, {"10.9.0.0", "", "EADDRNOTAVAIL"}, {"255.255.255.255", "", "ok"},
		{"224.0.0.251", "", "ok"}, {"0.1.2.3", "", "EADDRNOTAVAIL"}, {"192.0.2.1", "", "EADDRNOTAVAIL"},
		{"::", "", "ok"}, {"::1", "", "ok"}, {"::1", "d0", "EADDRNOTAVAIL"}, {"2001:db8::1", "", "ok"},
		{"2001:db8::1", "lo", "ok"}, {"2001:db8::2", "", "EADDRNOTAVAIL"}, {"ff05::1", "", "ok"},
		{"::ffff:10.9.0.1", "", "ok"}, {"::ffff:10.9.0.2", "", "EADDRNOTAVAIL"}, {"::ffff:224.0.0.251", "", "ok"},
		{"::ffff:10.9.0.255", "", "ok"}, {"::ffff:0.0.0.0", "", "ok"}, {"::2", "", "EADDRNOTAVAIL"},
		{"fe80::1%d0", "", "ok"}, {"fe80::1%lo", "", "EADDRNOTAVAIL"}, {"fe80::2%d0", "", "EADDRNOTAVAIL"},
	} {
		s := rb("s"+strconv.Itoa(i), c.addr, uint16(5800+i))
		if c.dev != "" {
			s = rb("s"+strconv.Itoa(i), c.addr, uint16(5800+i), c.dev)
		}
		steps = append(steps, rbErr(s, c.want))
	}
	return rscen("bind: local-address check", steps...)
}

// TestKernelRehash runs the scenarios on the kernel and on every table
// configuration.
func TestKernelRehash(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the kernel rehash checks need root in CI")
		}
		t.Skip("kernel rehash checks skipped: they need root for a network namespace")
	}
	n, err := setupRnet(false)
	require.NoError(t, err)
	defer n.close()
	var isLocal func(netip.Addr, int) bool
	n.th.Do(func() { isLocal, err = n.isLocal() })
	require.NoError(t, err)
	for _, sc := range append(rehashScenarios, localScenario()) {
		for _, c := range demuxtest.Configs() {
			t.Run(sc.name+"/"+c.Name, func(t *testing.T) {
				cfg := c.Table
				cfg.IsLocal = isLocal
				tab, err := demux.New[string](cfg)
				require.NoError(t, err)
				n.run(t, sc, tab)
			})
		}
	}
	for _, sc := range bareScenarios {
		for _, c := range demuxtest.Configs() {
			t.Run(sc.name+"/"+c.Name, func(t *testing.T) {
				b, err := setupRnet(true)
				require.NoError(t, err)
				defer b.close()
				tab, err := demux.New[string](c.Table)
				require.NoError(t, err)
				b.run(t, sc, tab)
			})
		}
	}
}

// run runs sc on the kernel and on tab, step by step.
func (n *rnet) run(t *testing.T, sc rscenario, tab *demux.Table[string]) {
	fds := map[string]int{}
	socks := map[string]*demux.Socket[string]{}
	var names []string
	defer n.th.Do(func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	})
	devOf := func(name string) int {
		switch name {
		case "lo":
			return n.lo
		case "d0":
			return n.d0
		}
		return 0
	}
	for i, st := range sc.steps {
		where := fmt.Sprintf("step %d (%s %s)", i, st.op, st.sock)
		switch st.op {
		case "bind":
			o := st.bind
			o.Device = devOf(st.dev)
			if z := o.Addr.Zone(); z != "" {
				o.Addr = o.Addr.WithZone(strconv.Itoa(devOf(z)))
			}
			var fd int
			var kerr error
			n.th.Do(func() { fd, kerr = rehashBind(o) })
			assert.Equal(t, st.want, demuxtest.ErrnoName(demuxtest.Errno(kerr)), "%s: kernel", where)
			s, err := tab.Bind(o, st.sock)
			assert.Equal(t, demuxtest.ErrnoName(demuxtest.Errno(kerr)), demuxtest.ErrnoName(demuxtest.Errno(err)), "%s: table vs kernel (%v)", where, err)
			if kerr == nil {
				fds[st.sock] = fd
				names = append(names, st.sock)
			} else if fd >= 0 {
				n.th.Do(func() { syscall.Close(fd) })
			}
			if err == nil {
				socks[st.sock] = s
			}
		case "connect":
			peer := netip.MustParseAddrPort(st.peer)
			if z := peer.Addr().Zone(); z != "" {
				peer = netip.AddrPortFrom(peer.Addr().WithZone(strconv.Itoa(devOf(z))), peer.Port())
			}
			var kerr error
			var local netip.AddrPort
			n.th.Do(func() {
				if kerr = syscall.Connect(fds[st.sock], scopedSockaddr(peer, fds[st.sock])); kerr == nil {
					local = sockname(fds[st.sock])
				}
			})
			assert.Equal(t, st.want, demuxtest.ErrnoName(demuxtest.Errno(kerr)), "%s: kernel", where)
			// The table takes the source the kernel chose; where the
			// kernel found none, the unspecified address says so.
			src := local.Addr()
			switch {
			case kerr != nil && peer.Addr().Unmap().Is4():
				src = netip.IPv4Unspecified()
			case kerr != nil:
				src = netip.IPv6Unspecified()
			case !socks[st.sock].LocalAddr().Addr().Unmap().IsUnspecified():
				src = netip.Addr{} // a specific socket keeps its address
			}
			err := socks[st.sock].Connect(peer, src)
			assert.Equal(t, demuxtest.ErrnoName(demuxtest.Errno(kerr)), demuxtest.ErrnoName(demuxtest.Errno(err)), "%s: table vs kernel (%v)", where, err)
		case "ip":
			var err error
			n.th.Do(func() { err = ipCmd(st.args...) })
			require.NoError(t, err, where)
		case "disconnect":
			var kerr error
			n.th.Do(func() { kerr = disconnect(fds[st.sock]) })
			require.NoError(t, kerr, where)
			require.NoError(t, socks[st.sock].Disconnect(), where)
		case "setdev":
			var kerr error
			n.th.Do(func() {
				kerr = syscall.SetsockoptInt(fds[st.sock], syscall.SOL_SOCKET, soBindToIfindex, devOf(st.dev))
			})
			require.NoError(t, kerr, where)
			require.NoError(t, socks[st.sock].SetDevice(devOf(st.dev)), where)
		case "send":
			src, dst := netip.MustParseAddrPort(st.peer), netip.MustParseAddrPort(st.dst)
			var got string
			var kerr error
			n.th.Do(func() { got, kerr = n.send(src, dst, names, fds) })
			require.NoError(t, kerr, where)
			assert.Equal(t, st.want, got, "%s %v → %v: kernel", where, src, dst)
			s, v := tab.Lookup(src, dst, n.lo)
			if s == nil {
				v = "none"
			}
			assert.Equal(t, got, v, "%s %v → %v: table vs kernel", where, src, dst)
		}
		// Every socket's local address and device agree after every step.
		for _, name := range names {
			var k netip.AddrPort
			var kdev int
			n.th.Do(func() {
				k = scopedSockname(fds[name])
				kdev, _ = syscall.GetsockoptInt(fds[name], syscall.SOL_SOCKET, soBindToIfindex)
			})
			assert.Equal(t, k, socks[name].LocalAddr(), "%s: local address of %s", where, name)
			assert.Equal(t, kdev, socks[name].Options().Device, "%s: device of %s", where, name)
		}
	}
}

// rehashBind makes and binds a socket as o says; it returns the socket even
// when bind fails, for the caller to close.
func rehashBind(o demux.Options) (int, error) {
	is6 := o.Addr.Is6()
	fd, err := socket(is6, 0)
	if err != nil {
		return -1, err
	}
	set := func(level, opt int, on bool) {
		if on && err == nil {
			err = syscall.SetsockoptInt(fd, level, opt, 1)
		}
	}
	set(syscall.SOL_SOCKET, syscall.SO_REUSEADDR, o.ReuseAddr)
	set(syscall.SOL_SOCKET, soReusePort, o.ReusePort)
	set(syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, o.V6Only)
	if o.Device != 0 && err == nil {
		err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, soBindToIfindex, o.Device)
	}
	if err != nil {
		return fd, err
	}
	return fd, syscall.Bind(fd, scopedSockaddr(netip.AddrPortFrom(o.Addr, o.Port), fd))
}

// scopedSockaddr is sockaddr with a numeric zone as the scope id; an IPv4
// address for an IPv6 socket fd goes v4-mapped.
func scopedSockaddr(ap netip.AddrPort, fd int) syscall.Sockaddr {
	a := ap.Addr()
	if dom, _ := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_DOMAIN); dom == syscall.AF_INET6 && a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	if a.Is4() {
		return &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	id, _ := strconv.Atoi(a.Zone())
	return &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16(), ZoneId: uint32(id)}
}

// scopedSockname is getsockname with the scope id as a numeric zone.
func scopedSockname(fd int) netip.AddrPort {
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}
	}
	if s6, ok := sa.(*syscall.SockaddrInet6); ok && s6.ZoneId != 0 {
		return netip.AddrPortFrom(netip.AddrFrom16(s6.Addr).WithZone(strconv.Itoa(int(s6.ZoneId))), uint16(s6.Port))
	}
	return fromSockaddr(sa)
}

// disconnect is connect with AF_UNSPEC, which the syscall package cannot
// express.
func disconnect(fd int) error {
	var sa [16]byte // sa_family AF_UNSPEC (0)
	if _, _, e := syscall.Syscall(syscall.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa[0])), uintptr(len(sa))); e != 0 {
		return e
	}
	return nil
}

// send sends one datagram from src (any address: the sender is
// transparent) to dst, then a sentinel through the same loopback backlog,
// and returns which of the named sockets received the datagram, "none" if
// none did.
func (n *rnet) send(src, dst netip.AddrPort, names []string, fds map[string]int) (string, error) {
	fd, err := socket(src.Addr().Is6(), 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	err = setTransparent(fd, src.Addr().Is6())
	if err == nil {
		err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}
	if err == nil {
		err = syscall.Bind(fd, sockaddr(src))
	}
	if err == nil {
		err = syscall.Sendto(fd, []byte("datagram"), 0, sockaddr(dst))
	}
	if err == nil {
		err = syscall.Sendto(n.sentTx, []byte("sentinel"), 0, sockaddr(n.sentAddr))
	}
	if err != nil {
		return "", err
	}
	var b [16]byte
	if _, _, err := syscall.Recvfrom(n.sentRx, b[:], 0); err != nil {
		return "", fmt.Errorf("sentinel: %w", err)
	}
	got := "none"
	for _, name := range names {
		if k, _, err := syscall.Recvfrom(fds[name], b[:], syscall.MSG_DONTWAIT); err == nil && k == 8 {
			if got != "none" {
				return "", errors.New("two sockets received one datagram")
			}
			got = name
		}
	}
	return got, nil
}
