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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// Socket options that the frozen syscall package does not name.
const (
	soReusePort     = 0xf  // SO_REUSEPORT
	soIncomingCPU   = 0x31 // SO_INCOMING_CPU
	soBindToIfindex = 0x3e // SO_BINDTOIFINDEX (Linux 5.0)
)

// startThread starts the thread every socket of a run is made on: in root
// mode it has unshared its network namespace, and it is pinned to one CPU
// so that a datagram and the sentinel sent after it go through the same
// loopback backlog, in order.
func startThread(unshare bool) (*osthread.Thread, error) {
	return osthread.Start(unshare, pinToOneCPU)
}

// pinToOneCPU restricts the calling thread to the first CPU it may run on.
func pinToOneCPU() error {
	var mask [128]byte
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, uintptr(len(mask)), uintptr(unsafe.Pointer(&mask[0]))); e != 0 {
		return fmt.Errorf("sched_getaffinity: %w", e)
	}
	for i, b := range mask {
		for bit := 0; bit < 8; bit++ {
			if b&(1<<bit) == 0 {
				continue
			}
			var one [128]byte
			one[i] = 1 << bit
			if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, uintptr(len(one)), uintptr(unsafe.Pointer(&one[0]))); e != 0 {
				return fmt.Errorf("sched_setaffinity: %w", e)
			}
			return nil
		}
	}
	return errors.New("sched_getaffinity: empty CPU mask")
}

// device is a network interface that SO_BINDTODEVICE can name.
type device struct {
	name    string
	ifindex int
}

// peer is a fixed socket that datagrams are sent from.
type peer struct {
	addr netip.AddrPort // IPv4 peers in 4-byte form
	fd   int
}

// env is the network the scenarios run in.
type env struct {
	th   *osthread.Thread
	root bool // own namespace, devices, several owners

	devs []device // lo first
	// nov4 and nov6 are the ifindexes of the devices without an IPv4 and
	// without an IPv6 address (0 without them); peers 10.98.0.2 and
	// fd04::2, reached through them, are at peers[bare4] and
	// peers[bare6] (-1 without them). A connect through nov4 finds no IPv4
	// source and keeps the wildcard; through nov6, no IPv6 source
	// (EADDRNOTAVAIL).
	nov4, nov6   int
	bare4, bare6 int
	uid          uint32   // the test's own uid, the owner of sockets in non-root mode
	ports        []uint16 // scenario ports
	probe        uint16   // port for the arrival-interface probe

	// Address pools the generator draws from.
	bind4, bind6 []netip.Addr // bind addresses (IPv6 includes v4-mapped)
	dst4, dst6   []netip.Addr // datagram destinations
	fillers4     []netip.Addr // extra IPv4 addresses for long chains
	fillers6     []netip.Addr // extra IPv6 addresses for long chains
	peers        []peer

	// arrive maps a destination address to the interface its datagrams
	// arrive on (found by the probe, not assumed).
	arrive map[netip.Addr]int

	sentRx, sentTx int            // sentinel receiver and sender
	sentAddr       netip.AddrPort // sentinel receiver address

	// kern holds the model features the running kernel has, as the probes
	// found them (probe_linux_test.go).
	kern feature
	// Setup notes for the log.
	notes []string
	// Probe datagrams sent, that came after their sentinel, and resent.
	probeSent, probeLate, probeResent int
}

const (
	addrPlaceholder = "127.0.0.6" // Linux's LOOPBACK4_IPV6 placeholder
)

var (
	any4        = netip.IPv4Unspecified()
	any6        = netip.IPv6Unspecified()
	mappedAny   = netip.MustParseAddr("::ffff:0.0.0.0")
	placeholder = netip.MustParseAddr(addrPlaceholder)
)

// setupEnv builds the test network. As root, in a fresh network namespace
// with extra addresses and a veth pair; otherwise on the host's loopback.
func setupEnv(forceLoopback bool) (*env, error) {
	root := os.Geteuid() == 0 && !forceLoopback
	th, err := startThread(root)
	if err != nil && root {
		// No namespaces here (a container without CAP_SYS_ADMIN, say):
		// fall back to plain loopback.
		root = false
		th, err = startThread(false)
	}
	if err != nil {
		return nil, err
	}
	e := &env{th: th, root: root, uid: uint32(os.Getuid()), arrive: map[netip.Addr]int{}, bare4: -1, bare6: -1}
	th.Do(func() { err = e.setup() })
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	e.th.Do(func() {
		for _, p := range e.peers {
			syscall.Close(p.fd)
		}
		if e.sentRx > 0 {
			syscall.Close(e.sentRx)
		}
		if e.sentTx > 0 {
			syscall.Close(e.sentTx)
		}
	})
	e.th.Stop()
}

func mustAddrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// setup runs on the thread.
func (e *env) setup() error {
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("no lo: %w", err)
	}
	e.devs = []device{{"lo", lo.Index}}
	e.bind4 = mustAddrs("0.0.0.0", "127.0.0.1", "127.0.0.2", addrPlaceholder)
	e.bind6 = mustAddrs("::ffff:127.0.0.1", "::ffff:127.0.0.2", "::ffff:0.0.0.0", "::ffff:"+addrPlaceholder)
	e.dst4 = mustAddrs("127.0.0.1", "127.0.0.2", "127.0.0.3", addrPlaceholder)
	var peerAddrs, far []string // far: peers beyond a device
	if e.root {
		e.ports = []uint16{50000, 50001}
		e.probe = 50999
		if err := ip("link", "set", "lo", "up"); err != nil {
			return err
		}
		// Is this really a fresh namespace? It must have lo and nothing else.
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 {
			return fmt.Errorf("the new network namespace has %d interfaces, want only lo", len(ifs))
		}
		for _, a := range []string{"fd00::1", "fd00::2", "fd00::3"} {
			if err := ip("-6", "addr", "add", a+"/128", "dev", "lo", "nodad"); err != nil {
				return err
			}
		}
		for i := 1; i <= 14; i++ {
			e.fillers4 = append(e.fillers4, netip.AddrFrom4([4]byte{127, 0, 1, byte(i)}))
			a := fmt.Sprintf("fd00::1:%x", i)
			if err := ip("-6", "addr", "add", a+"/128", "dev", "lo", "nodad"); err != nil {
				return err
			}
			e.fillers6 = append(e.fillers6, netip.MustParseAddr(a))
		}
		e.bind6 = append(e.bind6, mustAddrs("::", "::1", "fd00::1", "fd00::2")...)
		e.dst6 = mustAddrs("::1", "fd00::1", "fd00::2", "fd00::3")
		peerAddrs = []string{"127.0.0.1:40001", "127.0.0.1:40002", "127.0.0.2:40001", addrPlaceholder + ":40001",
			"[::1]:40001", "[::1]:40002", "[fd00::2]:40001"}
		// A veth pair is the second and third device. Its IPv4 addresses
		// have link scope: for a device without an IPv4 address of its
		// own, routing borrows another device's only if it has global
		// scope (inet_select_addr), so the namespace has none to lend, and
		// a connect through such a device (nov4 below, or lo towards
		// 10.99.0.2) keeps the wildcard.
		if err := ip("link", "add", "veth0", "type", "veth", "peer", "name", "veth1"); err != nil {
			e.notes = append(e.notes, fmt.Sprintf("no veth pair, lo is the only device (%v)", err))
		} else {
			cmds := [][]string{
				{"link", "set", "veth0", "up"}, {"link", "set", "veth1", "up"},
				{"addr", "add", "10.99.0.1/24", "dev", "veth0", "scope", "link"},
				{"addr", "add", "10.99.0.2/24", "dev", "veth1", "scope", "link"},
				{"-6", "addr", "add", "fd01::1/128", "dev", "veth0", "nodad"},
				{"-6", "addr", "add", "fd01::2/128", "dev", "veth1", "nodad"},
			}
			for _, c := range cmds {
				if err := ip(c...); err != nil {
					return err
				}
			}
			for _, n := range []string{"veth0", "veth1"} {
				ifc, err := net.InterfaceByName(n)
				if err != nil {
					return err
				}
				e.devs = append(e.devs, device{n, ifc.Index})
			}
			e.bind4 = append(e.bind4, mustAddrs("10.99.0.1", "10.99.0.2")...)
			e.bind6 = append(e.bind6, mustAddrs("fd01::1", "::ffff:10.99.0.1")...)
			e.dst4 = append(e.dst4, mustAddrs("10.99.0.1", "10.99.0.2")...)
			e.dst6 = append(e.dst6, mustAddrs("fd01::1", "fd01::2")...)
			peerAddrs = append(peerAddrs, "10.99.0.2:40001", "[fd01::2]:40001")
			if far, err = e.setupBare(ip); err != nil {
				return err
			}
			peerAddrs = append(peerAddrs, far...)
		}
		e.sentAddr = netip.MustParseAddrPort("127.0.0.1:39999")
	} else {
		// The host's loopback: ports from a random base below the
		// ephemeral range; peers and sentinel on ephemeral ports.
		base := uint16(20000 + time.Now().UnixNano()%9000)
		e.ports = []uint16{base, base + 1}
		e.probe = base + 2
		for i := 1; i <= 14; i++ {
			e.fillers4 = append(e.fillers4, netip.AddrFrom4([4]byte{127, 0, 1, byte(i)}))
		}
		peerAddrs = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.2:0", addrPlaceholder + ":0"}
		if fd, err := socket(true, 0); err == nil {
			err = syscall.Bind(fd, sockaddr(netip.MustParseAddrPort("[::1]:0")))
			syscall.Close(fd)
			if err == nil {
				e.bind6 = append(e.bind6, mustAddrs("::", "::1")...)
				e.dst6 = mustAddrs("::1")
				peerAddrs = append(peerAddrs, "[::1]:0", "[::1]:0")
			} else {
				e.notes = append(e.notes, "no IPv6 on loopback: IPv4 and v4-mapped only")
			}
		}
		e.sentAddr = netip.MustParseAddrPort("127.0.0.1:0")
		why := "not root"
		if os.Geteuid() == 0 {
			why = "forced or no network namespaces"
		}
		e.notes = append(e.notes, fmt.Sprintf("%s: ports %d-%d, lo only (no SO_BINDTODEVICE), one owner (uid %d)", why, e.ports[0], e.ports[1], e.uid))
	}

	for _, s := range peerAddrs {
		ap := netip.MustParseAddrPort(s)
		fd, err := socket(ap.Addr().Is6(), 0)
		if err != nil {
			return err
		}
		if ap.Addr().Is6() {
			syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1)
		}
		if slices.Contains(far, s) {
			// Transparent, to bind and send from an address the
			// namespace does not have.
			if err := setTransparent(fd, ap.Addr().Is6()); err != nil {
				syscall.Close(fd)
				return fmt.Errorf("peer %v: %w", ap, err)
			}
		}
		switch s {
		case bare4Peer:
			e.bare4 = len(e.peers)
		case bare6Peer:
			e.bare6 = len(e.peers)
		}
		if err := syscall.Bind(fd, sockaddr(ap)); err != nil {
			syscall.Close(fd)
			return fmt.Errorf("bind peer %v: %w", ap, err)
		}
		if ap.Port() == 0 {
			ap = sockname(fd)
		}
		e.peers = append(e.peers, peer{addr: ap, fd: fd})
	}

	// The sentinel: sent after each datagram, its arrival means the
	// datagram before it has been delivered (or dropped).
	if e.sentRx, err = socket(false, 0); err != nil {
		return err
	}
	if err := syscall.Bind(e.sentRx, sockaddr(e.sentAddr)); err != nil {
		return fmt.Errorf("bind sentinel: %w", err)
	}
	e.sentAddr = sockname(e.sentRx)
	if err := syscall.SetsockoptTimeval(e.sentRx, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &syscall.Timeval{Sec: 2}); err != nil {
		return err
	}
	if e.sentTx, err = socket(false, 0); err != nil {
		return err
	}
	if err := syscall.Bind(e.sentTx, sockaddr(netip.AddrPortFrom(e.sentAddr.Addr(), 0))); err != nil {
		return err
	}
	if err := e.probeArrival(); err != nil {
		return err
	}
	return e.probeKernel()
}

// The peers beyond the devices without an address of a family.
const (
	bare4Peer = "10.98.0.2:40001"
	bare6Peer = "[fd04::2]:40001"
)

// setupBare adds the devices without an address of a family, the two ends
// of a veth pair, and returns the peers beyond them:
//
//   - nov4 has IPv6 addresses but no IPv4 one. 10.98.0.0/24 is routed
//     through it, and a local route (no address) makes 10.97.0.1 arrive on
//     it. A wildcard socket connecting through it, to 10.98.0.2 or, bound
//     to it, to any IPv4 peer, keeps the wildcard.
//   - nov6 has an IPv4 address but no IPv6 one (not even link-local), and
//     use_oif_addrs_only (else Linux takes an IPv6 source from any
//     device). fd04::/64 is routed through it: a wildcard socket
//     connecting to fd04::2 gets EADDRNOTAVAIL.
func (e *env) setupBare(ip func(...string) error) ([]string, error) {
	cmds := [][]string{
		{"link", "add", "nov4", "type", "veth", "peer", "name", "nov6"},
		{"link", "set", "nov6", "addrgenmode", "none"},
		{"link", "set", "nov4", "up"}, {"link", "set", "nov6", "up"},
		{"-6", "addr", "add", "fd03::1/64", "dev", "nov4", "nodad"},
		{"route", "add", "10.98.0.0/24", "dev", "nov4"},
		{"route", "add", "local", "10.97.0.1/32", "dev", "nov4", "table", "local"},
		{"addr", "add", "10.96.0.1/24", "dev", "nov6", "scope", "link"},
		{"-6", "route", "add", "fd04::/64", "dev", "nov6"},
	}
	for _, c := range cmds {
		if err := ip(c...); err != nil {
			return nil, err
		}
	}
	// /proc/sys/net shows the calling thread's network namespace: the
	// test's (the host has no nov6, so a mistake fails here).
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/nov6/use_oif_addrs_only", []byte("1"), 0); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		name string
		p    *int
	}{{"nov4", &e.nov4}, {"nov6", &e.nov6}} {
		ifc, err := net.InterfaceByName(d.name)
		if err != nil {
			return nil, err
		}
		*d.p = ifc.Index
		e.devs = append(e.devs, device{d.name, ifc.Index})
	}
	e.dst4 = append(e.dst4, mustAddrs("10.97.0.1", "10.96.0.1")...)
	e.dst6 = append(e.dst6, mustAddrs("fd03::1")...)
	return []string{bare4Peer, bare6Peer, "[fd03::2]:40001"}, nil
}

// setTransparent sets IP_TRANSPARENT (IPV6_TRANSPARENT on an IPv6 socket):
// the socket may bind and send from an address that is not local.
func setTransparent(fd int, fam6 bool) error {
	if fam6 {
		return syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, ipv6Transparent, 1)
	}
	return syscall.SetsockoptInt(fd, syscall.SOL_IP, ipTransparent, 1)
}

// probeArrival finds, for every destination address, the interface its
// datagrams arrive on: one wildcard socket per device and family, bound to
// the device, and a datagram to each destination; the socket that gets it
// names the interface. (Linux delivers local traffic through lo but reports
// the device that owns the destination address.)
func (e *env) probeArrival() error {
	for _, fam6 := range []bool{false, true} {
		dsts := e.dst4
		if fam6 {
			dsts = e.dst6
		}
		if len(dsts) == 0 {
			continue
		}
		fds := make([]int, len(e.devs))
		defer func() {
			for _, fd := range fds {
				if fd > 0 {
					syscall.Close(fd)
				}
			}
		}()
		wild := netip.IPv4Unspecified()
		if fam6 {
			wild = netip.IPv6Unspecified()
		}
		for i, d := range e.devs {
			fd, err := socket(fam6, 0)
			if err != nil {
				return err
			}
			fds[i] = fd
			if fam6 {
				syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1)
			}
			if e.root {
				if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, soBindToIfindex, d.ifindex); err != nil {
					return fmt.Errorf("SO_BINDTOIFINDEX %s: %w", d.name, err)
				}
			}
			if err := syscall.Bind(fd, sockaddr(netip.AddrPortFrom(wild, e.probe))); err != nil {
				return fmt.Errorf("probe bind on %s: %w", d.name, err)
			}
		}
		var from *peer
		for i := range e.peers {
			if e.peers[i].addr.Addr().Is6() == fam6 {
				from = &e.peers[i]
				break
			}
		}
		for di, dst := range dsts {
			got, err := probeOne(e, from, fds, dst, uint64(di))
			if err != nil {
				return err
			}
			e.arrive[dst] = e.devs[got].ifindex
		}
	}
	var b strings.Builder
	for _, d := range e.devs {
		fmt.Fprintf(&b, " %s=%d", d.name, d.ifindex)
	}
	e.notes = append(e.notes, "devices:"+b.String(), e.probeNote())
	return nil
}

// Probe timing. Just after the namespace is built, a datagram to an
// address of the veth pair is sometimes dropped (in 7 of 30 back-to-back
// setups on a loaded machine), and under load one could come after its
// sentinel; so the probe waits for its datagram, and sends it again if it
// does not come.
const (
	probeWait     = 500 * time.Millisecond
	probeAttempts = 5
)

// probeOne sends datagrams from peer from to dst until one of the probe
// sockets fds receives it, and returns that socket's index. The payload
// tells the attempts and the destinations apart, so that a datagram that
// comes late is not taken for another's.
func probeOne(e *env, from *peer, fds []int, dst netip.Addr, di uint64) (int, error) {
	for attempt := uint64(0); attempt < probeAttempts; attempt++ {
		payload := di<<8 | attempt
		if err := e.send(from.fd, netip.AddrPortFrom(dst, e.probe), payload); err != nil {
			return -1, err
		}
		e.probeSent++
		if attempt > 0 {
			e.probeResent++
		}
		got := -1
		for deadline, sweep := time.Now().Add(probeWait), 0; got < 0 && time.Now().Before(deadline); sweep++ {
			if sweep == 1 {
				e.probeLate++
			}
			for i, fd := range fds {
				for {
					p, ok := recvPayload(fd)
					if !ok {
						break
					}
					if p>>8 != di {
						continue // a late datagram for an earlier destination
					}
					if got >= 0 && got != i {
						return -1, fmt.Errorf("probe: a datagram to %v arrived on two sockets", dst)
					}
					got = i
				}
			}
			if got < 0 {
				time.Sleep(time.Millisecond)
			}
		}
		if got >= 0 {
			return got, nil
		}
	}
	return -1, fmt.Errorf("probe: none of %d datagrams from %v to %v arrived on any device within %v",
		probeAttempts, from.addr, dst, probeWait)
}

// probeNote says how the setup probe went: how many datagrams came late,
// or had to be sent again.
func (e *env) probeNote() string {
	return fmt.Sprintf("setup probe: %d datagrams, %d came after their sentinel, %d resent", e.probeSent, e.probeLate, e.probeResent)
}

// mustSetup builds the test network, or ends the test: with a failure when
// the test must run (as root, which can build its own namespace, or when
// the CI variable is set), else with a skip.
func mustSetup(t *testing.T) *env {
	t.Helper()
	e, err := setupEnv(os.Getenv("UDPDEMUX_CONFORMANCE_LOOPBACK") != "")
	if err == nil {
		return e
	}
	if ci := os.Getenv("CI"); os.Geteuid() == 0 || ci != "" && ci != "false" {
		t.Fatalf("kernel conformance test cannot set up (as root or with CI set, it must run): %v", err)
	}
	t.Skipf("kernel conformance test skipped: cannot set up UDP sockets on loopback: %v", err)
	return nil
}

// socket makes a UDP socket of the given family whose owner (the uid
// SO_REUSEPORT compares) is owner. It must run on the env thread: the fsuid
// switch is per thread, and so is the network namespace.
func socket(fam6 bool, owner uint32) (int, error) {
	af := syscall.AF_INET
	if fam6 {
		af = syscall.AF_INET6
	}
	if owner != 0 {
		syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(owner), 0, 0)
		defer syscall.RawSyscall(syscall.SYS_SETFSUID, 0, 0, 0)
	}
	fd, err := syscall.Socket(af, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	return fd, nil
}

// send sends an 8-byte payload from fd to dst, then the sentinel, and waits
// for the sentinel: when it returns, the datagram has been delivered or
// dropped.
func (e *env) send(fd int, dst netip.AddrPort, payload uint64) error {
	var b [8]byte
	for i := range b {
		b[i] = byte(payload >> (8 * i))
	}
	if err := syscall.Sendto(fd, b[:], 0, sockaddr(dst)); err != nil {
		return fmt.Errorf("sendto %v: %w", dst, err)
	}
	mark := ^payload
	for i := range b {
		b[i] = byte(mark >> (8 * i))
	}
	if err := syscall.Sendto(e.sentTx, b[:], 0, sockaddr(e.sentAddr)); err != nil {
		return fmt.Errorf("sentinel sendto: %w", err)
	}
	for {
		var r [16]byte
		n, _, err := syscall.Recvfrom(e.sentRx, r[:], 0)
		if err != nil {
			return fmt.Errorf("sentinel did not arrive: %w", err)
		}
		if n == 8 && le64(r[:8]) == mark {
			return nil
		}
	}
}

// recvPayload reads one datagram from fd without blocking.
func recvPayload(fd int) (uint64, bool) {
	var r [16]byte
	n, _, err := syscall.Recvfrom(fd, r[:], syscall.MSG_DONTWAIT)
	if err != nil || n != 8 {
		return 0, false
	}
	return le64(r[:8]), true
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func sockaddr(ap netip.AddrPort) syscall.Sockaddr {
	if ap.Addr().Is4() {
		return &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

func fromSockaddr(sa syscall.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *syscall.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

func sockname(fd int) netip.AddrPort {
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}
	}
	return fromSockaddr(sa)
}
