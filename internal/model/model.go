// Package model is a deliberately plain reference model of a UDP socket
// table with Linux's semantics: the differential tests of package demux
// diff the table against it, and the kernel conformance test classifies
// each step of the real kernel with it.
//
// The model keeps its sockets in one slice, in bind order, and answers every
// question with a linear scan. It is written from the rules of DESIGN.md
// ("Lookup", "Bind and bind(0)", "Semantics table") and from Linux 6.18's
// net/ipv4/udp.c, net/ipv6/udp.c and net/core/sock_reuseport.c, not from
// the demux implementation: when the two disagree, one of them is wrong,
// and a test says which case. Where the rules are silent, the model follows
// Linux 6.18 as observed with real sockets on loopback, and says so where
// it does (DESIGN.md, "Kernel behaviours found by the conformance test"):
// the 4-tuple precedence of connected sockets, the 127.0.0.6 placeholder
// fallback, and the order of connect's errors. Speed is not a goal; being
// obviously right is.
//
// The model also keeps what Linux's answers depend on and udpdemux's do not
// (chain order, SO_REUSEPORT groups as history left them, an IPv6 socket's
// old peer), so that Check and Candidates can answer as a kernel with
// any set of Features; Bind, Lookup and the rest answer as udpdemux.
//
// Addresses follow net/netip. Datagram addresses given in v4-mapped form
// (::ffff:a.b.c.d) are treated as IPv4, as the kernel does.
package model

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
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

// Features are Linux behaviours that the model can answer with or without.
// A kernel has a set of them (Linux 6.18 has them all, builds differ in
// some); udpdemux follows Hash4 and PlaceholderFallback and leaves out the
// others, the deliberate differences of DESIGN.md (numbered the same), on
// purpose. The conformance test tells those apart by switching them: a
// step is a deliberate difference exactly when its answer changes with them.
type Features uint16

const (
	// Diff1: a bind's conflict check stops at the first socket it meets
	// that overlaps, and allows the bind if that one is a compatible
	// SO_REUSEPORT socket.
	Diff1 Features = 1 << iota
	// Diff1Peer, as Linux 6.18.44 narrowed difference 1: the check stops
	// at the first overlapping socket that is incompatible or that the new
	// one would share a group with (same owner, family, V6Only, address,
	// device and SO_REUSEADDR), and allows the bind in the second case.
	// With Diff1 it changes nothing.
	Diff1Peer
	// Diff2: a lookup returns the group of the first SO_REUSEPORT socket
	// it meets with a better score than those before, unless that group
	// (Linux's, see Diff6) has had a connected member; then it picks a
	// member, and a later socket must beat both the pick's score and
	// that of the socket that led to the group.
	Diff2
	// Diff3: IPv6 SO_REUSEPORT sockets are appended at the tail of their
	// primary chain and, until a rehash moves them, their secondary one,
	// so they lose ties and the bind check meets them last.
	Diff3
	// Diff4: a bind to a specific address on a port with more than 10
	// sockets checks only the secondary chains of its address and of the
	// wildcard, and so misses a placeholder's holder, which is hashed
	// under its IPv6 address.
	Diff4
	// Diff6: SO_REUSEPORT groups follow Linux's history. A connect, a
	// wildcard socket's disconnect and SO_BINDTODEVICE detach a socket,
	// and nothing puts it back; a bind joins the group of the first
	// matching socket of the primary chain, starting one with it if it
	// has none. Without it, a group is every unconnected SO_REUSEPORT
	// socket of one family, V6Only, address, port, device and owner.
	Diff6
	// Diff7: an IPv6 socket keeps its peer's address after a disconnect,
	// and its IPv6 lookups go on filtering on it, scoring one more.
	Diff7
	// Hash4 (Linux 6.13+): a lookup first returns the most recently
	// hashed connected socket whose 4-tuple hash entry, current 4-tuple and
	// device match, whatever the scores (see socket.hash4).
	Hash4
	// PlaceholderFallback (Linux 6.13+): when both secondary lookups find
	// nothing, Linux scores the port's primary chain against the exact
	// destination, which finds the dual-stack sockets that hold the IPv4
	// placeholder 127.0.0.6 (DESIGN.md, "Kernel behaviours found by the
	// conformance test").
	PlaceholderFallback

	// Linux is every feature: Linux 6.18 as first measured.
	Linux = Diff1<<iota - 1
	// Udpdemux is udpdemux's rules.
	Udpdemux = Hash4 | PlaceholderFallback
)

var featureNames = []string{"diff1", "diff1-peer", "diff2", "diff3", "diff4", "diff6", "diff7", "hash4", "placeholder-fallback"}

// String names the features, joined by "+"; "none" for none.
func (f Features) String() string {
	var s []string
	for i, n := range featureNames {
		if f&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
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
	// socks holds the live sockets, oldest first: the order of Linux's
	// secondary chains, tail first. A connect that changes a socket's
	// local address moves it to the end: it then counts as the most
	// recently bound socket for ties (Linux rehashes it to the head of its
	// new secondary chain). Ids give the primary chains' order.
	socks  []*socket
	nextID int
	// connects counts first connects, to order the 4-tuple precedence.
	connects int
	// groups holds each of udpdemux's SO_REUSEPORT groups' members in
	// Linux's order (Linux's own groups are in socket.group).
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
	// v4peer is the last IPv4 peer address the socket connected to,
	// Linux's inet_daddr: an IPv6 socket's later connect to an IPv6 peer
	// leaves it, and the IPv4 lookups of a placeholder's holder filter on
	// it.
	v4peer netip.Addr
	// oldPeer6 is the address an IPv6 socket's peer had before a
	// disconnect, which Linux keeps (Diff7); zero once it connects again.
	oldPeer6 netip.Addr
	// group is the socket's SO_REUSEPORT group as Linux's history left it
	// (Diff6), nil when detached; Model.groups holds udpdemux's.
	group *group
	// rehashed reports that a rehash moved the socket to the head of its
	// secondary chain, which it was appended to the tail of (Diff3).
	rehashed bool
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

// group is a Linux SO_REUSEPORT group: its members are the live sockets
// that point to it.
type group struct {
	// hasConns is Linux's reuse->has_conns: set when a member connects,
	// never cleared.
	hasConns bool
}

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
// e overlap for a bind conflict (with wild, wildcards match every address;
// without it, only themselves). It follows Linux's inet_rcv_saddr_equal
// (ipv4_rcv_saddr_equal / ipv6_rcv_saddr_equal), which is asymmetric in one
// corner: a new IPv4 socket compares IPv4 sides (so e's placeholder
// 127.0.0.6 counts), a new IPv6 socket compares IPv6 addresses unless both
// are v4-mapped or IPv4.
func overlap(n, e *socket, wild bool) bool {
	// An IPv4 socket counts as v4-mapped here.
	nMapped := !n.v6 || n.addr.Is4In6()
	eMapped := !e.v6 || e.addr.Is4In6()
	if !n.v6 || nMapped && eMapped {
		// IPv4, or both IPv4 in disguise: compare IPv4 sides,
		// ::ffff:0.0.0.0 being the IPv4 wildcard. An IPv6-only socket
		// has no IPv4 side at all.
		return !e.v6only && (n.v4 == e.v4 || wild && (n.v4 == any4 || e.v4 == any4))
	}
	nAny := n.addr == any6
	eAny := e.v6 && e.addr == any6
	if nAny && eAny {
		// "::" against "::" always overlaps, V6Only or not: both
		// receive IPv6 datagrams for every address.
		return true
	}
	// "::" reaches every IPv6 address, and IPv4 ones unless V6Only.
	if wild && eAny && !(e.v6only && nMapped) || wild && nAny && !(n.v6only && eMapped) {
		return true
	}
	return e.v6 && n.addr == e.addr
}

// inUse reports whether a bind of n fails for a socket of chain, met in
// chain order (Linux's udp_lib_lport_inuse): without Diff1 and Diff1Peer,
// whether any socket conflicts (deliberate difference 1).
func inUse(n *socket, chain []*socket, f Features) bool {
	for _, e := range chain {
		if n.reuseAddr && e.reuseAddr || n.device != 0 && e.device != 0 && n.device != e.device || !overlap(n, e, true) {
			continue
		}
		// Two SO_REUSEPORT sockets of the same owner share the port.
		compatible := n.reusePort && e.reusePort && n.owner == e.owner
		switch {
		case f&Diff1 != 0:
			return !compatible
		case f&Diff1Peer != 0 && compatible && n.v6 == e.v6 && n.v6only == e.v6only && n.device == e.device &&
			n.reuseAddr == e.reuseAddr && overlap(n, e, false):
			return false
		case !compatible:
			return true
		}
	}
	return false
}

// conflicts reports whether a bind of n fails, for a kernel with f
// (Linux's udp_lib_get_port).
func (m *Model) conflicts(n *socket, f Features) bool {
	all := m.chain(n.port, netip.Addr{}, f)
	if key := hashKey(n.addr); f&Diff4 != 0 && key != any4 && len(all) > 10 {
		return inUse(n, m.chain(n.port, key, f), f) || inUse(n, m.chain(n.port, any4, f), f)
	}
	return inUse(n, all, f)
}

// chain returns the sockets on port in the order of Linux's chain, head
// first: the primary chain (by port) if key is zero, else the secondary
// chain of the key (see hashKey). The newest bound or rehashed is at the
// head; with Diff3, IPv6 SO_REUSEPORT sockets are at the tail, oldest
// first, unless a rehash moved one to the head of its secondary chain.
//
// Chains are per port and key, not per slot: the model ignores the keys
// that share a slot of Linux's tables. With Linux's 16384 slots, seeded per
// network namespace, a collision that matters (a wildcard socket that
// connects and, its old and new slot being one, is not moved to the head)
// is rare; the conformance test would count it as a model miss.
func (m *Model) chain(port uint16, key netip.Addr, f Features) []*socket {
	var out []*socket
	for _, s := range m.socks {
		if s.port == port && (!key.IsValid() || hashKey(s.addr) == key) {
			out = append(out, s)
		}
	}
	if !key.IsValid() {
		// A rehash does not move a socket in its primary chain.
		slices.SortFunc(out, func(a, b *socket) int { return a.id - b.id })
	}
	slices.Reverse(out)
	if f&Diff3 == 0 {
		return out
	}
	var head, tail []*socket
	for _, s := range out {
		if s.v6 && s.reusePort && (!key.IsValid() || !s.rehashed) {
			tail = append(tail, s)
		} else {
			head = append(head, s)
		}
	}
	slices.Reverse(tail)
	return append(head, tail...)
}

// add gives s an id and appends it as the newest socket. A SO_REUSEPORT
// socket joins its Linux group: that of the first socket of Linux's primary
// chain it would share one with, which starts one if it was detached.
func (m *Model) add(s *socket) int {
	for _, e := range m.chain(s.port, netip.Addr{}, Linux) {
		if s.reusePort && e.reusePort && e.owner == s.owner && e.v6 == s.v6 && e.v6only == s.v6only &&
			e.device == s.device && overlap(s, e, false) {
			if e.group == nil {
				e.group = &group{}
			}
			s.group = e.group
			break
		}
	}
	if s.reusePort && s.group == nil {
		s.group = &group{}
	}
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
	if err := m.Check(o, Udpdemux); err != nil {
		return 0, err
	}
	return m.Insert(o)
}

// Check returns the error that a bind of o to its explicit port gets from
// a kernel with features f, as Bind's, and changes nothing.
func (m *Model) Check(o Options, f Features) error {
	s, err := newSocket(o)
	switch {
	case err != nil:
		return err
	case o.Port == 0:
		return errEphemeral
	case m.conflicts(s, f):
		return errno(syscall.EADDRINUSE, "%v port %d in use", o.Addr, o.Port)
	}
	return nil
}

// Insert binds o to its explicit port without a conflict check, and returns
// its id: for a test that follows a kernel, which bound it. Bad options
// are an error, as in Bind.
func (m *Model) Insert(o Options) (int, error) {
	s, err := newSocket(o)
	if err != nil {
		return 0, err
	}
	if o.Port == 0 {
		return 0, errEphemeral
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
		if m.conflicts(s, Udpdemux) {
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
	if s, _ := newSocket(o); m.conflicts(s, Udpdemux) {
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
// connected sockets (see Candidates); reconnects do not update it.
func (m *Model) Connect(id int, remote netip.AddrPort, local netip.Addr) error {
	i, s := m.find(id)
	if s == nil {
		return errno(syscall.EBADF, "socket %d is closed", id)
	}
	c, err := s.connection(remote, local)
	if err != nil {
		return err
	}
	// A connected socket is in no SO_REUSEPORT group. Linux's rehash
	// detaches a socket whose connect gives it an address, before the
	// group learns of the connection.
	m.leave(s)
	if c.peer4 && s.v4 == any4 || !c.peer4 && s.addr == any6 {
		s.group = nil
	} else if s.group != nil {
		s.group.hasConns = true
	}
	s.remote = c.remote
	s.device = c.device
	s.oldPeer6 = netip.Addr{}
	if c.peer4 {
		s.v4peer = c.remote.Addr().Unmap()
	}
	// A socket that keeps its wildcard (routing found no source) is not
	// in Linux's 4-tuple hash; its first connect with an address is, and
	// leaves its Linux group then.
	if s.hash4 == 0 && !c.addr.Unmap().IsUnspecified() {
		s.group = nil
		m.connects++
		s.hash4 = m.connects
		s.hash4Local = normalize(netip.AddrPortFrom(c.addr, s.port))
		s.hash4Remote = normalize(s.remote)
	}
	if c.addr != s.addr {
		if hashKey(c.addr) != hashKey(s.addr) {
			m.rehash(i, s)
		}
		s.addr, s.v4 = c.addr, c.v4
	}
	return nil
}

// rehash moves s, at i in socks, to the head of its new secondary chain:
// it is the newest for ties.
func (m *Model) rehash(i int, s *socket) {
	m.socks = append(slices.Delete(m.socks, i, i+1), s)
	s.rehashed = true
}

// Disconnect returns socket id to unconnected, as connect with AF_UNSPEC
// does in Linux 6.18 (checked with real sockets): the peer is forgotten
// and the device unbound (one that SO_BINDTODEVICE or a zone bound too).
// A socket bound to 0.0.0.0 or "::" gets that address back, is rehashed
// (newest for ties) and leaves the 4-tuple hash; one bound to a specific
// address (::ffff:0.0.0.0 included) keeps its address, its place and its
// first 4-tuple. An SO_REUSEPORT socket joins its group again, as the last
// member (Linux's stays out of it, and a wildcard socket leaves it even if
// it was not connected: Diff6). An IPv6 socket's peer address is kept
// for Diff7. Unlike Linux, which unbinds the port of a socket that bind(0)
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
	if wild {
		s.group = nil // Linux's rehash, even when nothing else changes
	}
	if !s.remote.IsValid() && s.device == 0 && addr == s.addr {
		return nil // nothing changes, not even the group's order
	}
	if s.v6 && s.remote.IsValid() {
		s.oldPeer6 = s.remote.Addr()
	}
	m.leave(s)
	s.remote, s.v4peer, s.device = netip.AddrPort{}, netip.Addr{}, 0
	if wild {
		s.hash4, s.hash4Local, s.hash4Remote = 0, netip.AddrPort{}, netip.AddrPort{}
	}
	if hashKey(addr) != hashKey(s.addr) {
		m.rehash(i, s)
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
	s.group = nil // Linux's rehash, even to the same device
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

// score is Linux's compute_score for the datagram src→dst (normalized) on
// ifindex: -1 if s does not take it, else its rank. local is the address s
// must be bound to: the destination, or the family's wildcard. An IPv4
// socket ranks 2 on an IPv4 datagram, an IPv6 one 1; a peer's address and a
// peer's port that match add 4 each, a device that matches 4 (Linux adds 1
// for each on IPv6: the same order).
func score(s *socket, src, dst netip.AddrPort, local netip.Addr, ifindex int, f Features) int {
	sc := 1
	peer := s.remote.Addr()
	if dst.Addr().Is4() {
		if s.v6only || s.v4 != local {
			return -1
		}
		if !s.v6 {
			sc = 2
		}
		peer = s.v4peer
	} else if !s.v6 || s.addr != local {
		return -1
	} else if !peer.IsValid() && f&Diff7 != 0 {
		peer = s.oldPeer6
	}
	// Each of these that the socket sets must match, and adds 4.
	for _, r := range [...]struct{ set, match bool }{
		{peer.IsValid(), peer == src.Addr()},
		{s.remote.IsValid(), s.remote.Port() == src.Port()},
		{s.device != 0, s.device == ifindex},
	} {
		switch {
		case r.set && !r.match:
			return -1
		case r.set:
			sc += 4
		}
	}
	return sc
}

// Lookup returns the socket that receives a datagram from src to dst
// arriving on interface ifindex, and false if none does: the one Candidates
// names with udpdemux's rules, or the member of its SO_REUSEPORT group that
// Config.ReusePortIndex picks. If that index is outside the group, it
// returns -1 and true, which matches no socket.
func (m *Model) Lookup(src, dst netip.AddrPort, ifindex int) (int, bool) {
	got := m.candidates(src, dst, ifindex, Udpdemux)
	if len(got) == 0 {
		return 0, false
	}
	k, ok := keyOf(got[0])
	if !ok {
		return got[0].id, true
	}
	group := m.groups[k] // in Linux's order: joins append, a leaver's place goes to the last
	idx := 0
	if m.cfg.ReusePortIndex != nil {
		idx = m.cfg.ReusePortIndex(normalize(src), normalize(dst), len(group))
	}
	if idx < 0 || idx >= len(group) {
		// The index function is the table's; a bad index is its bug,
		// reported as a wrong socket rather than a panic here.
		return -1, true
	}
	return group[idx].id, true
}

// Candidates returns the sorted ids of the sockets that may receive a
// datagram from src to dst arriving on interface ifindex, for a kernel
// with features f: none, the one socket, or the SO_REUSEPORT group that
// the winner hands the datagram to.
//
// The order is Linux 6.18's: first the 4-tuple precedence of connected
// sockets (Hash4), then the secondary chain of the destination, then that
// of the wildcard, each scored (see score) head first with a strictly
// better score needed to win (so the newest wins ties), and last the
// placeholder fallback (PlaceholderFallback).
func (m *Model) Candidates(src, dst netip.AddrPort, ifindex int, f Features) []int {
	var ids []int
	for _, s := range m.candidates(src, dst, ifindex, f) {
		ids = append(ids, s.id)
	}
	slices.Sort(ids)
	return ids
}

func (m *Model) candidates(src, dst netip.AddrPort, ifindex int, f Features) []*socket {
	src, dst = normalize(src), normalize(dst)
	if dst.Addr().Is4() != src.Addr().Is4() {
		return nil // a datagram has one family
	}
	if f&Hash4 != 0 {
		// The most recently hashed socket whose 4-tuple hash entry is
		// this datagram's and whose current 4-tuple is too (a socket
		// that connected again stays at its first).
		var conn *socket
		for _, s := range m.socks {
			if s.hash4 != 0 && s.remote.IsValid() && s.hash4Local == dst && s.hash4Remote == src &&
				score(s, src, dst, dst.Addr(), ifindex, f) > 0 && (conn == nil || s.hash4 > conn.hash4) {
				conn = s
			}
		}
		if conn != nil {
			return []*socket{conn}
		}
	}
	locals := tiers(dst)
	if f&PlaceholderFallback != 0 {
		// The primary chain, scored against the destination: only the
		// dual-stack sockets that hold the placeholder, hashed under
		// their IPv6 address, score here and not in the tiers.
		locals = append(locals, netip.Addr{})
	}
	for _, local := range locals {
		chain := m.chain(dst.Port(), hashKey(local), f)
		if !local.IsValid() {
			local = dst.Addr()
		}
		c := scoring{src: src, dst: dst, local: local, ifindex: ifindex, f: f}
		if got := m.scan(chain, 0, 0, nil, &c); got != nil {
			return got
		}
	}
	return nil
}

// scoring is what a chain's sockets are scored against.
type scoring struct {
	src, dst netip.AddrPort
	local    netip.Addr
	ifindex  int
	f        Features
}

// of is s's score.
func (c *scoring) of(s *socket) int { return score(s, c.src, c.dst, c.local, c.ifindex, c.f) }

// scan returns the sockets that may take the datagram from chain[from:]
// on, given the best score so far and the sockets that hold it (got).
//
// With Diff2, the group of a socket that beats those before it is the
// answer unless it has had a connected member; if it has, Linux picks a
// member by the flow's hash, as for the answer, and goes on scanning with
// the pick as the answer, which a later socket must outscore as well as
// the socket that led to the group. A member's score may differ from the
// leader's (a disconnect unbinds the device without leaving the group),
// so each score among the members is followed on its own, and the answer
// is the union. (Linux's pick is the same each time the scan meets the
// group; the union does not know that, and may name more sockets.)
func (m *Model) scan(chain []*socket, from, best int, got []*socket, c *scoring) []*socket {
	for i := from; i < len(chain); i++ {
		s := chain[i]
		sc := c.of(s)
		if sc <= best {
			continue
		}
		best, got = sc, []*socket{s}
		g := m.group(s, c.f)
		switch {
		case len(g) == 0:
		case c.f&Diff2 == 0:
			got = g
		case s.group == nil || !s.group.hasConns:
			return g
		default:
			// The picks by the score a later socket must beat.
			picks := map[int][]*socket{}
			for _, r := range g {
				b := max(sc, c.of(r))
				picks[b] = append(picks[b], r)
			}
			var out []*socket
			for _, b := range slices.Sorted(maps.Keys(picks)) {
				for _, r := range m.scan(chain, i+1, b, picks[b], c) {
					if !slices.Contains(out, r) {
						out = append(out, r)
					}
				}
			}
			return out
		}
	}
	return got
}

// tiers returns the local addresses of the sockets that may take a
// datagram for dst, in the order of the secondary chains a lookup reads:
// dst's, then the wildcard's of its family.
func tiers(dst netip.AddrPort) []netip.Addr {
	if dst.Addr().Is4() {
		return []netip.Addr{dst.Addr(), any4}
	}
	return []netip.Addr{dst.Addr(), any6}
}

// group returns the SO_REUSEPORT group that s hands a datagram to: with
// Diff6 the unconnected members of its Linux group, else udpdemux's; none
// for a connected or detached socket.
func (m *Model) group(s *socket, f Features) []*socket {
	k, ok := keyOf(s)
	switch {
	case !ok:
		return nil
	case f&Diff6 == 0:
		return m.groups[k]
	}
	var out []*socket
	for _, e := range m.socks {
		if s.group != nil && e.group == s.group && !e.remote.IsValid() {
			out = append(out, e)
		}
	}
	return out
}

// Strays returns the ids of the sockets that Linux's 4-tuple lookup may
// find for a datagram by chance: each connected again after it was hashed,
// so its entry stays at its first 4-tuple, and its current 4-tuple and
// device match the datagram. The lookup compares a socket's current
// addresses, so it returns one when the two 4-tuples share a slot of the
// hash (one lookup in as many as it has slots, a different one in each
// network namespace, since the hash is seeded per namespace). Candidates,
// which knows no slots, leaves them out.
func (m *Model) Strays(src, dst netip.AddrPort, ifindex int) []int {
	src, dst = normalize(src), normalize(dst)
	var ids []int
	for _, s := range m.socks {
		if s.hash4 != 0 && (s.hash4Local != dst || s.hash4Remote != src) && s.remote.IsValid() &&
			(dst.Addr().Is6() || s.v4peer.IsValid()) && s.port == dst.Port() && score(s, src, dst, dst.Addr(), ifindex, 0) > 0 {
			ids = append(ids, s.id)
		}
	}
	return ids
}

// Receivers returns the sorted ids of every socket that receives a
// multicast or broadcast datagram from src to dst on ifindex: every
// candidate of Lookup in both secondary chains, without scoring and with
// every member of a ReusePort group.
func (m *Model) Receivers(src, dst netip.AddrPort, ifindex int) []int {
	src, dst = normalize(src), normalize(dst)
	var ids []int
	for _, local := range tiers(dst) {
		for _, s := range m.chain(dst.Port(), hashKey(local), Udpdemux) {
			if src.Addr().Is4() == dst.Addr().Is4() && score(s, src, dst, local, ifindex, Udpdemux) > 0 && !slices.Contains(ids, s.id) {
				ids = append(ids, s.id)
			}
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
