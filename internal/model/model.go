// Package model is a deliberately plain reference model of a UDP socket
// table with Linux's semantics, for differential tests of package demux.
//
// The model keeps its sockets in one slice, in bind order, and answers every
// question with a linear scan. It is written from the rules of DESIGN.md
// ("Lookup", "Bind and bind(0)", "Semantics table"), not from the demux
// implementation: when the two disagree, one of them is wrong, and a test
// says which case. Where the rules are silent, the model follows Linux 6.18
// as observed with real sockets on loopback, and says so where it does
// (DESIGN.md, "Kernel behaviours found by the conformance test"): the
// 4-tuple precedence of connected sockets, the 127.0.0.6 placeholder
// fallback, and the order of connect's errors. Speed is
// not a goal; being obviously right is.
//
// Addresses follow net/netip. Datagram addresses given in v4-mapped form
// (::ffff:a.b.c.d) are treated as IPv4, as the kernel does.
package model

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
)

// Options describes a socket to bind. Its fields are demux.Options',
// with their meaning and in their order, so that a test converts one to
// the other (model.Options(o)) and a field added to demux.Options stops
// that conversion compiling until the model learns it too. It is a type
// of the model's own because the model imports nothing of the table it
// judges. Port 0 asks for bind(0) (see Model.Bind), and V6Only is the
// flag as asked for (Socket.V6Only is the effective one).
type Options struct {
	Addr      netip.Addr
	Port      uint16
	ReuseAddr bool
	ReusePort bool
	Owner     uint32
	Device    int
	V6Only    bool
}

// Config configures a Model.
type Config struct {
	// PortLow and PortHigh bound the ephemeral range, inclusive. Both 0
	// means Linux's default, 32768–60999.
	PortLow, PortHigh uint16
	// ReservedPorts are never legal bind(0) choices; explicit binds to
	// them are fine.
	ReservedPorts []uint16
	// PreferUnused says that bind(0) must choose a port that no socket
	// uses at all whenever such a port exists in the range (the table's
	// default algorithm works that way). When false, any legal port is
	// accepted.
	PreferUnused bool
	// ReusePortIndex picks the member (0..n-1, in the group's order: joins
	// append, a leaver's place goes to the last member) of an
	// n-member SO_REUSEPORT group that the flow src→dst goes to. The model
	// has no hash of its own: the test passes the table's function, so
	// that both agree on which member receives. The addresses it gets are
	// normalized: v4-mapped ones are unmapped and zones are dropped. Nil
	// means member 0.
	ReusePortIndex func(src, dst netip.AddrPort, n int) int
}

// errEphemeral is returned by Bind for port 0: the model cannot choose the
// table's random port itself, so a test binds the table first and then
// checks its choice with CheckEphemeral and records it with BindAt.
var errEphemeral = errors.New("model: port 0; use CheckEphemeral and BindAt")

// Socket is the observable state of one bound socket, as Snapshot reports it.
type Socket struct {
	// ID is the id that Bind or BindAt returned.
	ID int
	// Local is the local address and port. The address has no zone (see
	// Device) and is in the socket's family: an IPv6 socket bound to or
	// connected through an IPv4 address shows it v4-mapped.
	Local netip.AddrPort
	// Remote is the connected peer, zero if unconnected; an IPv6 socket
	// shows an IPv4 peer v4-mapped.
	Remote netip.AddrPort
	// ReuseAddr, ReusePort and Owner are the options as bound.
	ReuseAddr, ReusePort bool
	Owner                uint32
	// Device is the bound interface: the Device option, or the zone of a
	// link-local address.
	Device int
	// V6Only is the effective flag: set when asked, and also for an IPv6
	// socket bound to a specific, non-mapped address.
	V6Only bool
}

// Model is the reference socket table. It is not safe for concurrent use.
type Model struct {
	cfg Config
	// socks holds the live sockets, oldest first. A connect that changes a
	// socket's local address moves it to the end: it then counts as the
	// most recently bound socket for ties (Linux rehashes it to the head of
	// its new secondary chain).
	socks  []*socket
	nextID int
	// connects counts first connects, to order the 4-tuple precedence.
	connects int
	// groups holds each SO_REUSEPORT group's members in Linux's order.
	groups map[groupKey][]*socket
}

// socket is one live socket.
type socket struct {
	id   int
	port uint16
	// v6 is the family: true for an IPv6 socket (including one bound to a
	// v4-mapped address).
	v6 bool
	// addr is the local address without zone, in the family's form (an
	// IPv6 socket's address is always 16 bytes).
	addr netip.Addr
	// v4 is the IPv4 side that bind conflicts with IPv4 sockets compare,
	// Linux's inet_rcv_saddr: an IPv4 socket's own address; for an IPv6
	// socket 0.0.0.0 for "::", a.b.c.d for ::ffff:a.b.c.d, and the
	// placeholder 127.0.0.6 for anything else (a specific IPv6 address,
	// or "::" after connecting to an IPv6 peer).
	v4        netip.Addr
	reuseAddr bool
	reusePort bool
	owner     uint32
	device    int
	v6only    bool
	// remote is the peer, zero when unconnected; in the family's form.
	remote netip.AddrPort
	// v4peer is the last IPv4 peer address an IPv6 socket connected to,
	// Linux's inet_daddr: a later connect to an IPv6 peer leaves it (only
	// the placeholder fallback looks at it).
	v4peer netip.Addr
	// hash4 is the order of the socket's first connect (0: never
	// connected), and hash4Local and hash4Remote the normalized 4-tuple
	// it connected with then. Linux 6.13+ hashes a connected socket by
	// that 4-tuple at its first connect only (a reconnect leaves the
	// entry as it was), and a datagram whose 4-tuple matches such an
	// entry goes to the most recently hashed match, before any scoring.
	hash4                   int
	hash4Local, hash4Remote netip.AddrPort
	// bound and boundV4 are addr and v4 as bound, which a disconnect
	// restores to a socket bound to a wildcard.
	bound, boundV4 netip.Addr
}

var (
	any4        = netip.IPv4Unspecified()
	any6        = netip.IPv6Unspecified()
	mappedAny   = netip.AddrFrom16(any4.As16()) // ::ffff:0.0.0.0
	placeholder = netip.AddrFrom4([4]byte{127, 0, 0, 6})
)

// New returns an empty model.
func New(cfg Config) *Model {
	if cfg.PortLow == 0 && cfg.PortHigh == 0 {
		cfg.PortLow, cfg.PortHigh = 32768, 60999
	}
	cfg.ReservedPorts = slices.Clone(cfg.ReservedPorts)
	return &Model{cfg: cfg}
}

// errno wraps a syscall errno with a reason, so that errors.Is works and a
// failing test says why.
func errno(e syscall.Errno, format string, args ...any) error {
	return fmt.Errorf("model: %s: %w", fmt.Sprintf(format, args...), e)
}

// mapped returns the v4-mapped form of an IPv4 address.
func mapped(a netip.Addr) netip.Addr { return netip.AddrFrom16(a.As16()) }

// isLinkLocal reports whether a is an IPv6 address that only makes sense
// with an interface: link-local unicast (fe80::/10) or link-local multicast
// (ff02::/16). netip unmaps v4-mapped addresses in these predicates, so they
// are excluded first.
func isLinkLocal(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast())
}

// newSocket validates o and builds the socket it describes, without a
// conflict check. The port is taken from o as is.
func newSocket(o Options) (*socket, error) {
	if !o.Addr.IsValid() {
		return nil, errno(syscall.EINVAL, "invalid address")
	}
	if o.Device < 0 {
		return nil, errno(syscall.EINVAL, "negative device %d", o.Device)
	}
	zone := o.Addr.Zone()
	addr := o.Addr.WithZone("")
	dev := o.Device
	s := &socket{
		port:      o.Port,
		v6:        addr.Is6(),
		addr:      addr,
		reuseAddr: o.ReuseAddr,
		reusePort: o.ReusePort,
		owner:     o.Owner,
	}
	mappedAddr := addr.Is4In6()
	// IPV6_V6ONLY is an IPv6 option; a v4-mapped address is IPv4 traffic,
	// which a V6Only socket refuses (DESIGN.md row 22).
	if o.V6Only && (!s.v6 || mappedAddr) {
		return nil, errno(syscall.EINVAL, "V6Only on IPv4 address %v", o.Addr)
	}
	// A zone names the interface of a link-local address and acts like
	// SO_BINDTODEVICE; it means nothing on other addresses, and it must
	// agree with an explicit Device.
	if zone != "" {
		if !isLinkLocal(addr) {
			return nil, errno(syscall.EINVAL, "zone on non-link-local address %v", o.Addr)
		}
		idx, err := strconv.Atoi(zone)
		if err != nil || idx <= 0 {
			return nil, errno(syscall.EINVAL, "zone %q is not an interface index", zone)
		}
		if dev != 0 && dev != idx {
			return nil, errno(syscall.EINVAL, "zone %d and device %d differ", idx, dev)
		}
		dev = idx
	}
	if isLinkLocal(addr) && dev == 0 {
		return nil, errno(syscall.EINVAL, "link-local address %v needs an interface", addr)
	}
	s.device = dev
	switch {
	case !s.v6:
		s.v4 = addr
	case addr == any6:
		s.v4 = any4
		s.v6only = o.V6Only
	case mappedAddr:
		s.v4 = addr.Unmap()
	default:
		// Linux sets IPV6_V6ONLY itself for a specific IPv6 address, and
		// gives the socket the placeholder IPv4 side 127.0.0.6.
		s.v4 = placeholder
		s.v6only = true
	}
	s.bound, s.boundV4 = s.addr, s.v4
	return s, nil
}

// hashKey is the address a socket is hashed under for the order of ties:
// "::" as 0.0.0.0, a v4-mapped address as its IPv4 address. A change of
// address that keeps the key (a dual-stack wildcard that connects to an
// IPv4 peer without a source address becomes ::ffff:0.0.0.0) does not
// rehash the socket.
func hashKey(a netip.Addr) netip.Addr {
	if a == any6 {
		return any4
	}
	return a.Unmap()
}

// overlap reports whether the addresses of a new socket n and a bound socket
// e overlap for a bind conflict. It follows Linux's inet_rcv_saddr_equal
// (ipv4_rcv_saddr_equal / ipv6_rcv_saddr_equal with wildcards matching),
// which is asymmetric in one corner: a new IPv4 socket compares IPv4 sides
// (so e's placeholder 127.0.0.6 counts), a new IPv6 socket compares IPv6
// addresses unless both are v4-mapped or IPv4.
func overlap(n, e *socket) bool {
	if !n.v6 {
		// An IPv6-only socket has no IPv4 side at all.
		if e.v6only {
			return false
		}
		return n.v4 == e.v4 || n.v4 == any4 || e.v4 == any4
	}
	// An IPv4 socket counts as v4-mapped here.
	nMapped := n.addr.Is4In6()
	eMapped := !e.v6 || e.addr.Is4In6()
	if nMapped && eMapped {
		// Both are IPv4 in disguise: compare as IPv4, ::ffff:0.0.0.0
		// being the IPv4 wildcard.
		if e.v6only {
			return false
		}
		return n.v4 == e.v4 || n.v4 == any4 || e.v4 == any4
	}
	nAny := n.addr == any6
	eAny := e.v6 && e.addr == any6
	if nAny && eAny {
		// "::" against "::" always overlaps, V6Only or not: both
		// receive IPv6 datagrams for every address.
		return true
	}
	// "::" reaches every IPv6 address, and IPv4 ones unless V6Only.
	if eAny && !(e.v6only && nMapped) {
		return true
	}
	if nAny && !(n.v6only && eMapped) {
		return true
	}
	return e.v6 && n.addr == e.addr
}

// conflicts reports whether binding n conflicts with the bound socket e.
func conflicts(n, e *socket) bool {
	if n.port != e.port {
		return false
	}
	if n.reuseAddr && e.reuseAddr {
		return false
	}
	if n.device != 0 && e.device != 0 && n.device != e.device {
		return false
	}
	if !overlap(n, e) {
		return false
	}
	// Two SO_REUSEPORT sockets of the same owner share the port. Every
	// socket on the port counts: unlike Linux, no ReusePort socket met
	// first excuses a conflict with another one (DESIGN.md, deliberate difference 1).
	return !(n.reusePort && e.reusePort && n.owner == e.owner)
}

// conflictsAny reports whether n conflicts with any live socket.
func (m *Model) conflictsAny(n *socket) bool {
	for _, e := range m.socks {
		if conflicts(n, e) {
			return true
		}
	}
	return false
}

// add gives s an id and appends it as the newest socket.
func (m *Model) add(s *socket) int {
	s.id = m.nextID
	m.nextID++
	m.socks = append(m.socks, s)
	m.join(s)
	return s.id
}

// groupKey says which SO_REUSEPORT group an unconnected ReusePort socket
// belongs to.
type groupKey struct {
	addr       netip.Addr
	port       uint16
	device     int
	v6, v6only bool
	owner      uint32
}

func keyOf(s *socket) (groupKey, bool) {
	return groupKey{s.addr, s.port, s.device, s.v6, s.v6only, s.owner}, s.reusePort && !s.remote.IsValid()
}

// join appends s to its group's member array, as Linux's reuse->socks.
func (m *Model) join(s *socket) {
	if k, ok := keyOf(s); ok {
		if m.groups == nil {
			m.groups = map[groupKey][]*socket{}
		}
		m.groups[k] = append(m.groups[k], s)
	}
}

// leave removes s from its group's member array: the last member takes
// its place, as in Linux's reuseport_detach_sock.
func (m *Model) leave(s *socket) {
	k, ok := keyOf(s)
	if !ok {
		return
	}
	g := m.groups[k]
	i := slices.Index(g, s)
	if i < 0 {
		return
	}
	g[i] = g[len(g)-1]
	if g = g[:len(g)-1]; len(g) == 0 {
		delete(m.groups, k)
	} else {
		m.groups[k] = g
	}
}

// Bind binds a socket to the explicit port o.Port and returns its id. Errors
// wrap syscall.EINVAL for bad options and syscall.EADDRINUSE for a conflict;
// on error nothing changes. Port 0 returns errEphemeral.
func (m *Model) Bind(o Options) (int, error) {
	s, err := newSocket(o)
	if err != nil {
		return 0, err
	}
	if o.Port == 0 {
		return 0, errEphemeral
	}
	if m.conflictsAny(s) {
		return 0, errno(syscall.EADDRINUSE, "%v port %d in use", o.Addr, o.Port)
	}
	return m.add(s), nil
}

// BindAt records a bind(0) that the table answered with port: it binds o at
// that port like Bind. Call CheckEphemeral first to check that the choice
// was legal.
func (m *Model) BindAt(o Options, port uint16) (int, error) {
	if port == 0 {
		return 0, errno(syscall.EINVAL, "BindAt port 0")
	}
	o.Port = port
	return m.Bind(o)
}

// inRange reports whether port is a possible bind(0) choice at all: inside
// the ephemeral range and not reserved.
func (m *Model) inRange(port uint16) bool {
	return port >= m.cfg.PortLow && port <= m.cfg.PortHigh && !slices.Contains(m.cfg.ReservedPorts, port)
}

// used reports whether any live socket uses port.
func (m *Model) used(port uint16) bool {
	for _, e := range m.socks {
		if e.port == port {
			return true
		}
	}
	return false
}

// legal returns the ports that bind(0) of o may choose: in range, not
// reserved, no conflict — and, with PreferUnused, unused if any such port
// exists.
func (m *Model) legal(o Options) ([]uint16, error) {
	s, err := newSocket(o)
	if err != nil {
		return nil, err
	}
	var free, unused []uint16
	for p := int(m.cfg.PortLow); p <= int(m.cfg.PortHigh); p++ {
		port := uint16(p)
		if !m.inRange(port) {
			continue
		}
		s.port = port
		if m.conflictsAny(s) {
			continue
		}
		free = append(free, port)
		if !m.used(port) {
			unused = append(unused, port)
		}
	}
	if m.cfg.PreferUnused && len(unused) > 0 {
		return unused, nil
	}
	return free, nil
}

// CheckEphemeral reports whether port is a legal answer of bind(0) for o:
// in the range, not reserved, without conflict, and (with PreferUnused)
// unused whenever some port of the range is unused. It returns nil if so and
// an error saying why not otherwise. It changes nothing.
func (m *Model) CheckEphemeral(o Options, port uint16) error {
	ports, err := m.legal(o)
	if err != nil {
		return fmt.Errorf("bind(0) succeeded but must fail: %w", err)
	}
	if slices.Contains(ports, port) {
		return nil
	}
	if !m.inRange(port) {
		return fmt.Errorf("model: port %d is outside %d-%d or reserved", port, m.cfg.PortLow, m.cfg.PortHigh)
	}
	o.Port = port
	if s, _ := newSocket(o); m.conflictsAny(s) {
		return fmt.Errorf("model: port %d conflicts with a bound socket", port)
	}
	return fmt.Errorf("model: port %d is in use while %d unused ports are free", port, len(ports))
}

// EphemeralError returns the error that a failed bind(0) of o must have:
// EINVAL for bad options, EADDRINUSE when no port of the range is legal, and
// nil when some port is legal (so bind(0) must not fail).
func (m *Model) EphemeralError(o Options) error {
	ports, err := m.legal(o)
	if err != nil {
		return err
	}
	if len(ports) == 0 {
		return errno(syscall.EADDRINUSE, "no free ephemeral port")
	}
	return nil
}

// find returns the live socket with the id, or nil.
func (m *Model) find(id int) (int, *socket) {
	for i, s := range m.socks {
		if s.id == id {
			return i, s
		}
	}
	return -1, nil
}

// Connect connects socket id to remote; local is the source address that
// routing chose. On error nothing changes. The errors, checked in Linux's
// order (verified on Linux 6.18), then the local address, which Linux has
// no counterpart for:
//   - EBADF for a closed socket;
//   - EINVAL for a bad remote: invalid, unspecified, or port 0 (Linux
//     would take the unspecified address as loopback and allow port 0;
//     the table refuses both);
//   - EAFNOSUPPORT for an IPv6 remote (v4-mapped included) on an IPv4
//     socket; ENETUNREACH for an IPv4 remote on a V6Only socket;
//   - EINVAL for a link-local IPv6 remote without an interface (neither a
//     zone on the remote nor a device) or whose zone differs from the
//     socket's device;
//   - EAFNOSUPPORT for a non-mapped IPv6 remote on a socket whose local
//     address is v4-mapped (::ffff:0.0.0.0 included);
//   - EINVAL for a missing or mismatched local address.
//
// A zone on a link-local remote binds the socket to that interface, as
// Linux does; zones on other remotes are ignored. A socket bound to a
// wildcard takes local as its local address (an IPv6 socket connecting to
// an IPv4 peer takes it v4-mapped; local may be given in either form) and
// becomes the most recently bound socket. A socket with a specific local
// address keeps it; local must then be zero or equal. The first successful
// connect also records the socket's 4-tuple for the precedence of
// connected sockets (see Lookup); reconnects do not update it.
func (m *Model) Connect(id int, remote netip.AddrPort, local netip.Addr) error {
	i, s := m.find(id)
	if s == nil {
		return errno(syscall.EBADF, "socket %d is closed", id)
	}
	c, err := s.connection(remote, local)
	if err != nil {
		return err
	}
	// A connected socket is in no SO_REUSEPORT group.
	m.leave(s)
	s.remote = c.remote
	s.device = c.device
	if c.peer4 && s.v6 {
		s.v4peer = c.remote.Addr().Unmap()
	}
	// A socket that keeps its wildcard (routing found no source) is not
	// in Linux's 4-tuple hash; its first connect with an address is.
	if s.hash4 == 0 && !c.addr.Unmap().IsUnspecified() {
		m.connects++
		s.hash4 = m.connects
		s.hash4Local = normalize(netip.AddrPortFrom(c.addr, s.port))
		s.hash4Remote = normalize(s.remote)
	}
	if c.addr != s.addr {
		if hashKey(c.addr) != hashKey(s.addr) {
			// Rehashed: newest for ties.
			m.socks = append(slices.Delete(m.socks, i, i+1), s)
		}
		s.addr, s.v4 = c.addr, c.v4
	}
	return nil
}

// Disconnect returns socket id to unconnected, as connect with AF_UNSPEC
// does in Linux 6.18 (checked with real sockets): the peer is forgotten
// and the device unbound (one that SO_BINDTODEVICE or a zone bound too).
// A socket bound to 0.0.0.0 or "::" gets that address back, is rehashed
// (newest for ties) and leaves the 4-tuple hash; one bound to a specific
// address (::ffff:0.0.0.0 included) keeps its address, its place and its
// first 4-tuple. An SO_REUSEPORT socket joins its group again, as the last
// member. Unlike Linux, which unbinds the port of a socket that bind(0)
// gave one, the socket keeps its port. A closed id is EBADF.
func (m *Model) Disconnect(id int) error {
	i, s := m.find(id)
	if s == nil {
		return errno(syscall.EBADF, "socket %d is closed", id)
	}
	wild := s.bound == any4 || s.bound == any6
	addr, v4 := s.addr, s.v4
	if wild {
		addr, v4 = s.bound, s.boundV4
	}
	if !s.remote.IsValid() && s.device == 0 && addr == s.addr {
		return nil // nothing changes, not even the group's order
	}
	m.leave(s)
	s.remote, s.v4peer, s.device = netip.AddrPort{}, netip.Addr{}, 0
	if wild {
		s.hash4, s.hash4Local, s.hash4Remote = 0, netip.AddrPort{}, netip.AddrPort{}
	}
	if hashKey(addr) != hashKey(s.addr) {
		m.socks = append(slices.Delete(m.socks, i, i+1), s)
	}
	s.addr, s.v4 = addr, v4
	m.join(s)
	return nil
}

// SetDevice binds socket id to interface dev (0: none) after bind, as
// SO_BINDTODEVICE does in Linux 6.18: no conflict check, the socket keeps
// its place and peer. Linux rehashes the socket even when the device does
// not change: one in the 4-tuple hash at another 4-tuple than its current
// one moves there to its current 4-tuple, as the newest (a disconnected
// one to no peer, which no datagram matches). An SO_REUSEPORT socket moves to the group of its new device,
// as the last member (Linux only detaches it; udpdemux keeps every such
// socket in the group of its key: deliberate difference 6). A closed id is
// EBADF, a negative dev EINVAL.
func (m *Model) SetDevice(id, dev int) error {
	_, s := m.find(id)
	if s == nil {
		return errno(syscall.EBADF, "socket %d is closed", id)
	}
	if dev < 0 {
		return errno(syscall.EINVAL, "negative device %d", dev)
	}
	local, remote := normalize(netip.AddrPortFrom(s.addr, s.port)), normalize(s.remote)
	move := s.hash4 != 0 && (local != s.hash4Local || remote != s.hash4Remote)
	if dev == s.device && !move {
		return nil
	}
	m.leave(s)
	s.device = dev
	if move {
		m.connects++
		s.hash4 = m.connects
		s.hash4Local = normalize(netip.AddrPortFrom(s.addr, s.port))
		s.hash4Remote = normalize(s.remote)
	}
	m.join(s)
	return nil
}

// connection is the state that a valid connect gives a socket.
type connection struct {
	remote   netip.AddrPort // the peer, in the socket's family form
	peer4    bool           // the peer is IPv4 (given as IPv4 or v4-mapped)
	device   int
	addr, v4 netip.Addr // local address and IPv4 side
}

// connection checks a connect of s to remote from local, in Linux's order
// (see Connect), and returns the state it leads to. It changes nothing.
func (s *socket) connection(remote netip.AddrPort, local netip.Addr) (connection, error) {
	ra := remote.Addr().WithZone("")
	if !remote.IsValid() || ra.Unmap().IsUnspecified() || remote.Port() == 0 {
		return connection{}, errno(syscall.EINVAL, "bad remote %v", remote)
	}
	c := connection{peer4: ra.Unmap().Is4()}
	if !s.v6 {
		if ra.Is6() {
			return connection{}, errno(syscall.EAFNOSUPPORT, "IPv6 remote %v on IPv4 socket", remote)
		}
	} else {
		// An IPv6 socket talks to an IPv4 peer through its v4-mapped
		// address, which V6Only forbids.
		if c.peer4 {
			ra = mapped(ra.Unmap())
		}
		if c.peer4 && s.v6only {
			return connection{}, errno(syscall.ENETUNREACH, "IPv4 remote %v on V6Only socket", remote)
		}
	}
	c.remote = netip.AddrPortFrom(ra, remote.Port())
	var err error
	if c.device, err = s.peerDevice(remote); err != nil {
		return connection{}, err
	}
	// A v4-mapped local address (::ffff:0.0.0.0 included) cannot reach
	// an IPv6 peer: Linux's route lookup refuses the v4-mapped source
	// with EAFNOSUPPORT, after the link-local check above.
	if s.v6 && s.addr.Is4In6() && !c.peer4 {
		return connection{}, errno(syscall.EAFNOSUPPORT, "IPv6 remote %v on v4-mapped local %v", remote, s.addr)
	}
	if c.addr, c.v4, err = s.connectedLocal(remote, c.peer4, local.WithZone("")); err != nil {
		return connection{}, err
	}
	return c, nil
}

// peerDevice returns the device of s after a connect to remote. A
// link-local IPv6 peer needs an interface. As in Linux, the peer's zone
// names it and binds the socket to it (a socket already bound to another
// device refuses), and without one the socket must have a device:
// "Connect to link-local address requires an interface".
func (s *socket) peerDevice(remote netip.AddrPort) (int, error) {
	ra := remote.Addr()
	if !s.v6 || !isLinkLocal(ra.WithZone("")) {
		return s.device, nil
	}
	dev := s.device
	if zone := ra.Zone(); zone != "" {
		idx, err := strconv.Atoi(zone)
		if err != nil || idx < 0 {
			return 0, errno(syscall.EINVAL, "remote zone %q is not an interface index", zone)
		}
		if idx != 0 && s.device != 0 && s.device != idx {
			return 0, errno(syscall.EINVAL, "remote zone %d but device %d", idx, s.device)
		}
		if idx != 0 {
			dev = idx
		}
	}
	if dev == 0 {
		return 0, errno(syscall.EINVAL, "link-local remote %v needs a device", remote)
	}
	return dev, nil
}

// connectedLocal returns the local address and IPv4 side of s after a
// connect to remote (an IPv4 peer if peer4) with local the source address
// routing chose.
func (s *socket) connectedLocal(remote netip.AddrPort, peer4 bool, local netip.Addr) (addr, v4 netip.Addr, err error) {
	// localV4 reports whether local is an IPv4 address in either form.
	localV4 := local.IsValid() && local.Unmap().Is4()
	switch {
	case !s.addr.Unmap().IsUnspecified():
		// The local address is fixed. A dual-stack socket that an IPv6
		// connect gave an IPv6 address can still reconnect to an IPv4
		// peer: Linux keeps its IPv6 address and its IPv4 side
		// 127.0.0.6, which then only the placeholder fallback reaches.
		if local.IsValid() {
			l := local
			if s.v6 && localV4 {
				l = mapped(local.Unmap())
			}
			if (!s.v6 && !local.Is4()) || l != s.addr {
				return addr, v4, errno(syscall.EINVAL, "local %v differs from bound %v", local, s.addr)
			}
		}
		return s.addr, s.v4, nil
	case !local.IsValid():
		return addr, v4, errno(syscall.EINVAL, "wildcard socket needs a local address, got %v", local)
	case local.Unmap().IsUnspecified():
		// Routing found no source (checked on Linux 6.18 with a device
		// without an IPv4 address): an IPv4 connect keeps the wildcard,
		// which a dual-stack socket then shows as ::ffff:0.0.0.0; with
		// no IPv6 source an IPv6 connect fails.
		switch {
		case localV4 != peer4:
			return addr, v4, errno(syscall.EINVAL, "local %v for remote %v", local, remote)
		case !peer4:
			return addr, v4, errno(syscall.EADDRNOTAVAIL, "no IPv6 source for %v", remote)
		case s.v6:
			return mappedAny, any4, nil
		}
		return any4, any4, nil
	case !s.v6:
		if !local.Is4() {
			return addr, v4, errno(syscall.EINVAL, "local %v on IPv4 socket", local)
		}
		return local, local, nil
	case peer4:
		if !localV4 {
			return addr, v4, errno(syscall.EINVAL, "local %v for IPv4 peer %v", local, remote)
		}
		return mapped(local.Unmap()), local.Unmap(), nil
	}
	// "::" and an IPv6 peer (::ffff:0.0.0.0 was refused before).
	if localV4 || !local.Is6() {
		return addr, v4, errno(syscall.EINVAL, "local %v for IPv6 peer %v", local, remote)
	}
	// Linux keeps the placeholder 127.0.0.6 as the IPv4 side, so the
	// socket still blocks IPv4 wildcard binds (DESIGN.md row 24).
	return local, placeholder, nil
}

// Close removes socket id. A closed or unknown id is EBADF.
func (m *Model) Close(id int) error {
	i, s := m.find(id)
	if s == nil {
		return errno(syscall.EBADF, "socket %d is closed", id)
	}
	m.leave(s)
	m.socks = slices.Delete(m.socks, i, i+1)
	return nil
}

// Len returns the number of live sockets.
func (m *Model) Len() int { return len(m.socks) }

// normalize drops zones and unmaps v4-mapped addresses: a datagram is IPv4
// or IPv6, whatever its spelling.
func normalize(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().WithZone("").Unmap(), ap.Port())
}

// match reports whether s is a candidate for the datagram src→dst on
// ifindex (both normalized), and whether it is in the exact-address tier.
func match(s *socket, src, dst netip.AddrPort, ifindex int) (ok, exact bool) {
	if s.port != dst.Port() {
		return false, false
	}
	d := dst.Addr()
	if d.Is4() != src.Addr().Is4() {
		// A datagram has one family.
		return false, false
	}
	switch {
	case d.Is4() && !s.v6:
		exact = s.addr == d
		ok = exact || s.addr == any4
	case d.Is4():
		// IPv4 reaches IPv6 sockets bound to ::ffff:d, to "::" unless
		// V6Only, and to ::ffff:0.0.0.0.
		exact = s.addr == mapped(d)
		ok = exact || (s.addr == any6 && !s.v6only) || s.addr == mappedAny
	case s.v6:
		// IPv6 reaches only IPv6 sockets.
		exact = s.addr == d
		ok = exact || s.addr == any6
	}
	if !ok {
		return false, false
	}
	if s.remote.IsValid() && normalize(s.remote) != src {
		return false, false
	}
	if s.device != 0 && s.device != ifindex {
		return false, false
	}
	return true, exact
}

// score is the rank of a candidate within its tier.
func score(s *socket, dst netip.AddrPort) int {
	sc := 1
	if !s.v6 && dst.Addr().Is4() {
		sc = 2
	}
	if s.remote.IsValid() {
		sc += 8
	}
	if s.device != 0 {
		sc += 4
	}
	return sc
}

// Lookup returns the socket that receives a datagram from src to dst
// arriving on interface ifindex, and false if none does.
//
// The order is Linux 6.18's: first the 4-tuple precedence of connected
// sockets (see socket.hash4), then the exact-address tier, then the
// wildcard tier, scored as DESIGN.md ("Lookup") says, and last the placeholder
// fallback (see placeholderFallback). If the winner is
// in a ReusePort group and Config.ReusePortIndex answers an index outside
// the group, it returns -1 and true, which matches no socket.
func (m *Model) Lookup(src, dst netip.AddrPort, ifindex int) (int, bool) {
	src, dst = normalize(src), normalize(dst)
	// First the 4-tuple precedence of connected sockets (Linux's hash4):
	// the most recently first-connected socket whose first-connect
	// 4-tuple is this datagram's and that is connected (a disconnected
	// socket keeps its first 4-tuple, but Linux matches the current one)
	// and still matches it.
	var conn *socket
	for _, s := range m.socks {
		if s.hash4 == 0 || !s.remote.IsValid() || s.hash4Local != dst || s.hash4Remote != src {
			continue
		}
		if ok, _ := match(s, src, dst, ifindex); ok && (conn == nil || s.hash4 > conn.hash4) {
			conn = s
		}
	}
	if conn != nil {
		return conn.id, true
	}
	var best *socket
	bestExact, bestScore := false, 0
	for _, s := range m.socks {
		ok, exact := match(s, src, dst, ifindex)
		if !ok {
			continue
		}
		sc := score(s, dst)
		// The exact tier beats every wildcard socket; within a tier the
		// higher score wins, and ">=" lets a later (newer) socket win ties.
		if best == nil || (exact && !bestExact) || (exact == bestExact && sc >= bestScore) {
			best, bestExact, bestScore = s, exact, sc
		}
	}
	if best == nil {
		return m.placeholderFallback(src, dst, ifindex)
	}
	if !best.reusePort || best.remote.IsValid() {
		return best.id, true
	}
	k, _ := keyOf(best)
	group := m.groups[k] // in Linux's order: joins append, a leaver's place goes to the last
	idx := 0
	if m.cfg.ReusePortIndex != nil {
		idx = m.cfg.ReusePortIndex(src, dst, len(group))
	}
	if idx < 0 || idx >= len(group) {
		// The index function is the table's; a bad index is its bug,
		// reported as a wrong socket rather than a panic here.
		return -1, true
	}
	return group[idx].id, true
}

// holdsPlaceholder reports whether s is a dual-stack socket that a connect to an
// IPv6 peer gave an IPv6 local address: its IPv4 side is Linux's
// placeholder 127.0.0.6.
func holdsPlaceholder(s *socket) bool {
	return s.v6 && !s.v6only && s.v4 == placeholder && s.remote.IsValid()
}

// placeholderFallback is Linux 6.18's last resort for an IPv4 datagram that
// no socket matched: a socket holding the placeholder (see
// holdsPlaceholder) receives it if it is addressed to
// 127.0.0.6 and comes from the current peer's port — and from the address
// of the last IPv4 peer the socket connected to, if it ever reconnected to
// one (Linux's inet_daddr, which connects to IPv6 peers leave alone); else
// any source address passes. Among those sockets, a remembered IPv4 peer that
// matches and a bound device each add 4 to the score (as in Linux's
// compute_score), and ties go to the newest by bind order (the port's
// primary chain). All of this was checked on Linux 6.18 with real sockets.
func (m *Model) placeholderFallback(src, dst netip.AddrPort, ifindex int) (int, bool) {
	if dst.Addr() != placeholder || !src.Addr().Is4() {
		return 0, false
	}
	var best *socket
	bestScore := 0
	for _, s := range m.socks {
		if !holdsPlaceholder(s) || s.port != dst.Port() || s.remote.Port() != src.Port() {
			continue
		}
		if s.v4peer.IsValid() && s.v4peer != src.Addr() {
			continue
		}
		if s.device != 0 && s.device != ifindex {
			continue
		}
		sc := 1
		if s.v4peer.IsValid() {
			sc += 4
		}
		if s.device != 0 {
			sc += 4
		}
		if best == nil || sc > bestScore || (sc == bestScore && s.id > best.id) {
			best, bestScore = s, sc
		}
	}
	if best == nil {
		return 0, false
	}
	return best.id, true
}

// Receivers returns the sorted ids of every socket that receives a
// multicast or broadcast datagram from src to dst on ifindex: every
// candidate of Lookup, both tiers, without scoring and with every member
// of a ReusePort group.
func (m *Model) Receivers(src, dst netip.AddrPort, ifindex int) []int {
	src, dst = normalize(src), normalize(dst)
	var ids []int
	for _, s := range m.socks {
		if ok, _ := match(s, src, dst, ifindex); ok {
			ids = append(ids, s.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Snapshot returns every live socket, sorted by id.
func (m *Model) Snapshot() []Socket {
	out := make([]Socket, 0, len(m.socks))
	for _, s := range m.socks {
		out = append(out, Socket{
			ID:        s.id,
			Local:     netip.AddrPortFrom(s.addr, s.port),
			Remote:    s.remote,
			ReuseAddr: s.reuseAddr,
			ReusePort: s.reusePort,
			Owner:     s.owner,
			Device:    s.device,
			V6Only:    s.v6only,
		})
	}
	slices.SortFunc(out, func(a, b Socket) int { return a.ID - b.ID })
	return out
}
