//go:build linux

package conformance

import (
	"net/netip"
	"slices"
	"strings"
	"syscall"
)

// The model is a transcription of Linux 6.18's UDP socket table
// (net/ipv4/udp.c, net/ipv6/udp.c, net/ipv4/datagram.c, net/ipv6/datagram.c,
// net/core/sock_reuseport.c, inet_rcv_saddr_equal in
// net/ipv4/inet_connection_sock.c): chain orders, SO_REUSEPORT groups and the
// shortcuts. It is not what the test asserts; it classifies each step. A step
// is one of the deliberate differences (DESIGN.md) exactly when the model's
// answer changes with the corresponding kernel feature switched off; then
// the table must give the answer without the feature (udpdemux's rule) and
// the real kernel the answer with it. Every other step compares the table
// with the real kernel directly, and counts the steps where the model was
// wrong (none in some 60 000 scenarios when this was written).
//
// The model ignores hash-slot collisions: chains are modelled per (address,
// port), not per slot. With 16384 slots and a hash seeded per namespace, a
// collision that matters (a wildcard socket that connects and, its old and
// new slot being the same, is not moved to the head) is rare; it would show
// as a model miss.

// feature is a kernel behaviour the model can switch off.
type feature uint16

const (
	// featDiff1 (deliberate difference 1): a bind conflict check stops at
	// the first socket it meets that overlaps, and allows the bind if that
	// one is a compatible ReusePort socket.
	featDiff1 feature = 1 << iota
	// featDiff1Peer (deliberate difference 1, as Linux 6.18.44 narrowed
	// it): a bind conflict check stops at the first socket it meets that
	// overlaps and is either incompatible or a socket the new one would
	// share a group with (SO_REUSEPORT with the same owner, family,
	// V6Only, address, device and SO_REUSEADDR), and allows the bind in
	// the second case; other compatible ReusePort sockets no longer stop
	// it. Found by experiment; with featDiff1 it changes nothing.
	featDiff1Peer
	// featDiff2 (deliberate difference 2): a lookup returns the group of
	// the first ReusePort socket it meets with a better score than those
	// before, unless that group has had connected members.
	featDiff2
	// featDiff3 (deliberate difference 3): IPv6 ReusePort sockets are
	// appended to the end of their primary chain (sk_add_node_rcu) and of
	// their secondary chain at bind, so they lose ties and are met last by
	// the bind check.
	featDiff3
	// featHash4: connected sockets are hashed by 4-tuple when they
	// connect (Linux 6.13+); a lookup first returns the most recently
	// connected socket whose 4-tuple and device match, whatever the scores.
	// A socket that connects again keeps its old 4-tuple hash slot, so it
	// is no longer found there.
	featHash4
	// featPlaceholderFallback: the placeholder fallback. When the two
	// secondary lookups find nothing, Linux scores the primary chain
	// against the exact destination (6.13+). Only dual-stack "::" sockets
	// connected to an IPv6 peer are found that way: their IPv4 address is
	// the placeholder 127.0.0.6, and their IPv4 peer address is unset
	// unless they once connected to an IPv4 peer, so an IPv4 datagram to
	// 127.0.0.6 with the peer's port (and from that IPv4 peer, if set)
	// reaches them.
	featPlaceholderFallback
	// featDiff4 (deliberate difference 4): a bind to a specific address on
	// a port with more than 10 sockets checks only the secondary chains of
	// its address and of the wildcard (udp_lib_lport_inuse2), not the
	// port's primary chain. That misses a dual-stack "::" socket connected
	// to an IPv6 peer: its IPv4 address is the placeholder 127.0.0.6, but
	// it is hashed under its IPv6 address, so a bind to 127.0.0.6 does not
	// see it.
	featDiff4
	// featDiff6 (deliberate difference 6): SO_REUSEPORT groups follow
	// Linux's history. A connect (6.13+), a disconnect of a wildcard
	// socket and SO_BINDTODEVICE detach a socket from its group, and
	// nothing puts it back; a later bind joins the group of the first
	// matching socket in the primary chain, making a new one with that
	// socket if it has none. Off, a group is every unconnected ReusePort
	// socket with the same family, V6Only, local address, port, device and
	// owner: udpdemux's rule.
	featDiff6
	// featDiff7 (deliberate difference 7): an IPv6 socket keeps its old
	// peer's address after a disconnect (__udp_disconnect clears only the
	// IPv4 one), and IPv6 lookups go on filtering on it, scoring the match
	// one more. Off, a disconnect forgets the peer in both families.
	featDiff7

	featAll = featDiff1 | featDiff1Peer | featDiff2 | featDiff3 | featHash4 | featPlaceholderFallback | featDiff4 | featDiff6 | featDiff7

	// skipConnect46 is not a model feature but a knob for hunting: skip
	// connects of an IPv6 socket that already has a specific IPv6 local
	// address to a v4-mapped peer (Linux accepts them, see doConnect).
	skipConnect46 feature = 1 << 15
)

var featureNames = []struct {
	f    feature
	name string
}{{featDiff1, "diff1"}, {featDiff1Peer, "diff1-peer"}, {featDiff2, "diff2"}, {featDiff3, "diff3"}, {featDiff4, "diff4"}, {featDiff6, "diff6"}, {featDiff7, "diff7"},
	{featHash4, "hash4"}, {featPlaceholderFallback, "placeholder-fallback"}}

func (f feature) String() string {
	var s []string
	for _, n := range featureNames {
		if f&n.f != 0 {
			s = append(s, n.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
}

var (
	any4        = netip.IPv4Unspecified()
	any6        = netip.IPv6Unspecified()
	placeholder = netip.MustParseAddr(addrPlaceholder) // LOOPBACK4_IPV6

	mappedAny = netip.MustParseAddr("::ffff:0.0.0.0")
)

// msock is the model of one kernel socket.
type msock struct {
	id        int
	fam6      bool
	port      uint16
	reuseAddr bool
	reusePort bool
	owner     uint32
	dev       int
	v6only    bool       // ipv6_only_sock(): set by the user, or by a specific IPv6 bind
	bound     netip.Addr // the bind's address: a wildcard (not ::ffff:0.0.0.0) leaves SOCK_BINDADDR_LOCK unset

	rcv6 netip.Addr // AF_INET6: sk_v6_rcv_saddr
	rcv4 netip.Addr // inet_rcv_saddr (4-byte); 127.0.0.6 for specific IPv6 sockets
	key  netip.Addr // secondary hash key: IPv4 for IPv4, v4-mapped, "::"; else IPv6

	connected bool
	daddr4    netip.Addr // inet_daddr, 0.0.0.0 when unset
	daddr6    netip.Addr // AF_INET6: sk_v6_daddr, cleared by a disconnect as udpdemux does
	oldPeer6  netip.Addr // AF_INET6: the sk_v6_daddr that Linux keeps after a disconnect (featDiff7)
	dport     uint16

	group *mgroup // SO_REUSEPORT group (sk_reuseport_cb), nil when detached

	seq1        int64 // primary chain with featDiff3: larger is nearer the head
	seq1NoDiff3 int64 // primary chain without featDiff3
	seq2        int64 // secondary chain with featDiff3
	seq2NoDiff3 int64 // secondary chain without featDiff3
	hashed4     bool
	seq4        uint64 // 4-tuple chain: larger is nearer the head
	h4v4        bool   // hashed with the IPv4 4-tuple hash
	h4local     netip.AddrPort
	h4remote    netip.AddrPort
}

type mgroup struct {
	members  []*msock
	hasConns bool // reuse->has_conns: set when a member connects, never cleared
}

type model struct {
	socks map[int]*msock
	clock uint64
}

func newModel() *model { return &model{socks: map[int]*msock{}} }

func (m *model) tick() uint64 { m.clock++; return m.clock }

// prepare builds the model socket of a bind, or the errno the kernel gives
// before any conflict check.
func prepare(id int, b bindSpec) (*msock, syscall.Errno) {
	s := &msock{id: id, fam6: b.addr.Is6(), port: b.port, reuseAddr: b.reuseAddr, reusePort: b.reusePort,
		owner: b.owner, dev: b.dev, daddr4: any4, bound: b.addr}
	if !s.fam6 {
		s.rcv4, s.key = b.addr, b.addr
		return s, 0
	}
	s.v6only = b.v6only
	s.daddr6 = any6
	switch a := b.addr; {
	case a == any6:
		s.rcv6, s.rcv4, s.key = a, any4, any4
	case a.Is4In6():
		if s.v6only {
			return nil, syscall.EINVAL
		}
		s.rcv6, s.rcv4 = a, a.Unmap()
		s.key = s.rcv4
	default:
		s.rcv6, s.rcv4, s.key = a, placeholder, a
		s.v6only = true
	}
	return s, 0
}

type addrType int

const (
	typeAny addrType = iota
	typeMapped
	typeOther
)

func type6(a netip.Addr) addrType {
	switch {
	case a == any6:
		return typeAny
	case a.Is4In6():
		return typeMapped
	}
	return typeOther
}

// rcvEqual is inet_rcv_saddr_equal(sk, sk2, matchWild).
func rcvEqual(sk, sk2 *msock, mw bool) bool {
	if !sk.fam6 {
		if sk2.v6only {
			return false
		}
		if sk.rcv4 == sk2.rcv4 {
			return true
		}
		return mw && (sk.rcv4 == any4 || sk2.rcv4 == any4)
	}
	t1 := type6(sk.rcv6)
	t2 := typeMapped
	if sk2.fam6 {
		t2 = type6(sk2.rcv6)
	}
	if t1 == typeMapped && t2 == typeMapped {
		if sk2.v6only {
			return false
		}
		if sk.rcv4 == sk2.rcv4 {
			return true
		}
		return mw && (sk.rcv4 == any4 || sk2.rcv4 == any4)
	}
	if t1 == typeAny && t2 == typeAny {
		return true
	}
	if t2 == typeAny && mw && !(sk2.v6only && t1 == typeMapped) {
		return true
	}
	if t1 == typeAny && mw && !(sk.v6only && t2 == typeMapped) {
		return true
	}
	return sk2.fam6 && sk.rcv6 == sk2.rcv6
}

// primary returns the sockets on port in primary chain order.
func (m *model) primary(port uint16, f feature) []*msock {
	var out []*msock
	for _, s := range m.socks {
		if s.port == port {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *msock) int {
		if f&featDiff3 != 0 {
			return cmpDesc(a.seq1, b.seq1)
		}
		return cmpDesc(a.seq1NoDiff3, b.seq1NoDiff3)
	})
	return out
}

// secondary returns the sockets of the secondary chain (key, port) in order.
func (m *model) secondary(key netip.Addr, port uint16, f feature) []*msock {
	var out []*msock
	for _, s := range m.socks {
		if s.port == port && s.key == key {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *msock) int {
		if f&featDiff3 != 0 {
			return cmpDesc(a.seq2, b.seq2)
		}
		return cmpDesc(a.seq2NoDiff3, b.seq2NoDiff3)
	})
	return out
}

func cmpDesc[T int64 | uint64](a, b T) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// inuse scans a chain for a socket that blocks the bind of sk
// (udp_lib_lport_inuse / udp_lib_lport_inuse2).
func inuse(sk *msock, chain []*msock, f feature) bool {
	for _, s2 := range chain {
		if s2.port != sk.port || (s2.reuseAddr && sk.reuseAddr) ||
			(s2.dev != 0 && sk.dev != 0 && s2.dev != sk.dev) || !rcvEqual(sk, s2, true) {
			continue
		}
		compatible := s2.reusePort && sk.reusePort && s2.owner == sk.owner
		if f&featDiff1 != 0 {
			return !compatible
		}
		if f&featDiff1Peer != 0 && compatible && s2.fam6 == sk.fam6 && s2.v6only == sk.v6only &&
			s2.dev == sk.dev && s2.reuseAddr == sk.reuseAddr && rcvEqual(sk, s2, false) {
			return false
		}
		if !compatible {
			return true
		}
	}
	return false
}

// bindResult is udp_lib_get_port's answer for sk (prepared, not inserted).
func (m *model) bindResult(sk *msock, f feature) syscall.Errno {
	useHash2 := sk.rcv4 != any4 // inet_use_hash2_on_bind
	if sk.fam6 {
		switch type6(sk.rcv6) {
		case typeAny:
			useHash2 = false
		case typeOther:
			useHash2 = true
		}
	}
	prim := m.primary(sk.port, f)
	if useHash2 && len(prim) > 10 && f&featDiff4 != 0 {
		exist := inuse(sk, m.secondary(sk.key, sk.port, f), f)
		if !exist && sk.key != any4 {
			exist = inuse(sk, m.secondary(any4, sk.port, f), f)
		}
		if exist {
			return syscall.EADDRINUSE
		}
		return 0
	}
	if inuse(sk, prim, f) {
		return syscall.EADDRINUSE
	}
	return 0
}

// insert adds a bound socket: SO_REUSEPORT group, primary chain head,
// secondary chain head (tail for IPv6 ReusePort sockets).
func (m *model) insert(sk *msock) {
	if sk.reusePort {
		for _, s2 := range m.primary(sk.port, featAll) {
			if s2.fam6 == sk.fam6 && s2.v6only == sk.v6only && s2.dev == sk.dev && s2.reusePort &&
				s2.owner == sk.owner && rcvEqual(sk, s2, false) {
				if s2.group == nil { // a connected, detached socket: reuseport_alloc(sk2)
					s2.group = &mgroup{members: []*msock{s2}}
				}
				sk.group = s2.group
				break
			}
		}
		if sk.group == nil {
			sk.group = &mgroup{}
		}
		sk.group.members = append(sk.group.members, sk)
	}
	t := int64(m.tick())
	sk.seq1, sk.seq1NoDiff3, sk.seq2, sk.seq2NoDiff3 = t, t, t, t
	if sk.fam6 && sk.reusePort {
		sk.seq1, sk.seq2 = -t, -t
	}
	m.socks[sk.id] = sk
}

func (m *model) detach(s *msock) {
	if s.group == nil {
		return
	}
	s.group.members = slices.DeleteFunc(s.group.members, func(x *msock) bool { return x == s })
	s.group = nil
}

func (m *model) close(s *msock) {
	m.detach(s)
	delete(m.socks, s.id)
}

// rehash is udp_lib_rehash after the local address changed from a wildcard.
func (m *model) rehash(s *msock, key netip.Addr) {
	m.detach(s)
	if key != s.key {
		t := m.tick()
		s.key, s.seq2, s.seq2NoDiff3 = key, int64(t), int64(t)
	}
}

func (m *model) hash4(s *msock, v4 bool) {
	if s.hashed4 {
		return // a connect again does not rehash: the old slot stays
	}
	if v4 && s.rcv4 == any4 || !v4 && s.rcv6 == any6 {
		return
	}
	m.detach(s)
	s.hashed4, s.seq4, s.h4v4 = true, m.tick(), v4
	if v4 {
		s.h4local, s.h4remote = netip.AddrPortFrom(s.rcv4, s.port), netip.AddrPortFrom(s.daddr4, s.dport)
	} else {
		s.h4local, s.h4remote = netip.AddrPortFrom(s.rcv6, s.port), netip.AddrPortFrom(s.daddr6, s.dport)
	}
}

func (m *model) hasConnsSet(s *msock) {
	if s.group != nil {
		s.group.hasConns = true
	}
}

// connect applies a connect that succeeded in the kernel; local is the
// address getsockname reported after it.
func (m *model) connect(s *msock, remote netip.AddrPort, local netip.Addr) {
	s.oldPeer6 = netip.Addr{}
	switch {
	case !s.fam6:
		if s.rcv4 == any4 {
			s.rcv4 = local
			m.rehash(s, local)
		}
		s.daddr4, s.dport = remote.Addr(), remote.Port()
		m.hasConnsSet(s)
		s.connected = true
		m.hash4(s, true)
	case remote.Addr().Is4In6():
		// __ip4_datagram_connect on the AF_INET6 socket: when it takes
		// its IPv4 address it calls the protocol's rehash, which leaves the
		// secondary slot as it is (the IPv6 address is still a wildcard)
		// but detaches the socket from its group, before has_conns is set;
		// then the IPv6 side takes the mapped address and rehashes.
		if s.rcv4 == any4 {
			s.rcv4 = local.Unmap()
			m.detach(s)
		}
		s.daddr4, s.dport = remote.Addr().Unmap(), remote.Port()
		m.hasConnsSet(s)
		s.connected = true
		s.daddr6 = remote.Addr()
		if s.rcv6 == any6 || s.rcv6 == mappedAny {
			s.rcv6 = netip.AddrFrom16(s.rcv4.As16())
			m.rehash(s, s.rcv4)
		}
		m.hash4(s, true)
	default:
		s.daddr6, s.dport = remote.Addr(), remote.Port()
		if s.rcv6 == any6 {
			s.rcv6, s.rcv4 = local, placeholder
			m.rehash(s, local)
		}
		m.hasConnsSet(s)
		s.connected = true
		m.hash4(s, false)
	}
}

// disconnect applies connect(AF_UNSPEC) (__udp_disconnect): the peer and
// the device go; a socket bound to a wildcard gets it back and is rehashed,
// which detaches it from its group and takes it out of the 4-tuple hash; a
// socket bound to an address (SOCK_BINDADDR_LOCK, ::ffff:0.0.0.0 included)
// keeps its local address, its chain places and its 4-tuple hash entry,
// where its current 4-tuple no longer matches any datagram. An IPv6
// socket keeps its old IPv6 peer address in Linux (oldPeer6, featDiff7).
func (m *model) disconnect(s *msock) {
	if s.fam6 && s.daddr6 != any6 {
		s.oldPeer6 = s.daddr6
	}
	s.connected = false
	s.daddr4, s.dport, s.dev = any4, 0, 0
	if s.fam6 {
		s.daddr6 = any6
	}
	if s.bound == any4 || s.bound == any6 {
		s.rcv4 = any4
		if s.fam6 {
			s.rcv6 = any6
		}
		m.rehash(s, any4)
		s.hashed4 = false
	}
}

// setDevice applies SO_BINDTODEVICE on a bound socket
// (sock_bindtoindex_locked): the device changes, and the protocol's rehash
// runs even when it does not. The secondary slot stays (the address is
// the same), but the rehash detaches the socket from its group and, if its
// current 4-tuple hashes to another slot than its entry's, moves the entry
// there, as the newest (the model, which knows no slots, moves it when the
// 4-tuple differs); a socket without a local address would leave the
// 4-tuple hash, but only sockets with one are in it.
func (m *model) setDevice(s *msock, dev int) {
	s.dev = dev
	m.detach(s)
	if !s.hashed4 {
		return
	}
	v4 := !s.fam6 || s.rcv6.Is4In6()
	local, remote := netip.AddrPortFrom(s.rcv4, s.port), netip.AddrPortFrom(s.daddr4, s.dport)
	if !v4 {
		peer := s.daddr6
		if s.oldPeer6.IsValid() {
			peer = s.oldPeer6 // Linux's sk_v6_daddr
		}
		local, remote = netip.AddrPortFrom(s.rcv6, s.port), netip.AddrPortFrom(peer, s.dport)
	}
	if v4 == s.h4v4 && local == s.h4local && remote == s.h4remote {
		return // the same 4-tuple hashes to the same slot: udp_rehash4 leaves it
	}
	s.seq4, s.h4v4, s.h4local, s.h4remote = m.tick(), v4, local, remote
}

// ruleGroup is udpdemux's SO_REUSEPORT group of s: every unconnected
// ReusePort socket with its family, V6Only, local address, port, device and
// owner, in id order.
func (m *model) ruleGroup(s *msock) []int {
	var out []int
	for _, x := range m.socks {
		if x.reusePort && !x.connected && x.fam6 == s.fam6 && x.v6only == s.v6only && x.port == s.port &&
			x.dev == s.dev && x.owner == s.owner && x.rcv4 == s.rcv4 && (!s.fam6 || x.rcv6 == s.rcv6) {
			out = append(out, x.id)
		}
	}
	slices.Sort(out)
	return out
}

// staleHash4 returns the sockets that Linux's 4-tuple lookup finds for the
// datagram by chance: each connected again after it entered the 4-tuple
// hash, so it stays in the slot of its first 4-tuple, and its current
// 4-tuple and device match the datagram. The lookup compares a socket's
// current addresses, so it returns one when the two 4-tuples share a slot:
// one lookup in as many as the table has slots (16384 here), a different
// one in each namespace, since the hash is seeded per namespace
// (TestKernelStaleHash4). The model, which knows no slots, leaves them out
// of lookup; the runner excuses a kernel that delivers to one of them.
func (m *model) staleHash4(src, dst netip.AddrPort, ifindex int) []int {
	var out []int
	for _, s := range m.socks {
		if !s.hashed4 || s.h4local == dst && s.h4remote == src || s.port != dst.Port() || s.dport != src.Port() ||
			s.dev != 0 && s.dev != ifindex {
			continue
		}
		if dst.Addr().Is4() && s.rcv4 == dst.Addr() && s.daddr4 == src.Addr() && !s.v6only ||
			dst.Addr().Is6() && s.fam6 && s.rcv6 == dst.Addr() && s.daddr6 == src.Addr() {
			out = append(out, s.id)
		}
	}
	return out
}

// lookup returns the ids of the sockets the kernel may deliver the datagram
// to: none, one, or the members of a SO_REUSEPORT group.
func (m *model) lookup(src, dst netip.AddrPort, ifindex int, f feature) []int {
	v4 := dst.Addr().Is4()
	devOK := func(s *msock) bool { return s.dev == 0 || s.dev == ifindex }
	if f&featHash4 != 0 {
		var best *msock
		for _, s := range m.socks {
			if !s.hashed4 || s.h4v4 != v4 || s.h4local != dst || s.h4remote != src || !devOK(s) || s.port != dst.Port() || s.dport != src.Port() {
				continue
			}
			if v4 && (s.rcv4 != dst.Addr() || s.daddr4 != src.Addr()) ||
				!v4 && (!s.fam6 || s.rcv6 != dst.Addr() || s.daddr6 != src.Addr()) {
				continue // connected again since it was hashed
			}
			if best == nil || s.seq4 > best.seq4 {
				best = s
			}
		}
		if best != nil {
			return []int{best.id}
		}
	}
	score := func(s *msock, daddr netip.Addr) int {
		if s.port != dst.Port() {
			return -1
		}
		if v4 {
			if s.v6only || s.rcv4 != daddr {
				return -1
			}
			sc := 2
			if s.fam6 {
				sc = 1
			}
			if s.daddr4 != any4 {
				if s.daddr4 != src.Addr() {
					return -1
				}
				sc += 4
			}
			if s.dport != 0 {
				if s.dport != src.Port() {
					return -1
				}
				sc += 4
			}
			if s.dev != 0 {
				if s.dev != ifindex {
					return -1
				}
				sc += 4
			}
			return sc
		}
		if !s.fam6 || s.rcv6 != daddr {
			return -1
		}
		sc := 0
		if s.dport != 0 {
			if s.dport != src.Port() {
				return -1
			}
			sc++
		}
		daddr6 := s.daddr6
		if f&featDiff7 != 0 && s.oldPeer6.IsValid() {
			daddr6 = s.oldPeer6
		}
		if daddr6 != any6 {
			if daddr6 != src.Addr() {
				return -1
			}
			sc++
		}
		if s.dev != 0 {
			if s.dev != ifindex {
				return -1
			}
			sc++
		}
		return sc
	}
	scan := func(chain []*msock, daddr netip.Addr) []int {
		var result []int
		badness := 0
		if !v4 {
			badness = -1
		}
		for _, s := range chain {
			sc := score(s, daddr)
			if sc <= badness {
				continue
			}
			badness = sc
			if f&featDiff6 == 0 && !s.connected && s.reusePort {
				// udpdemux's groups: no history, and no shortcut that
				// depends on it (featDiff2 needs the kernel's groups).
				result = m.ruleGroup(s)
				if f&featDiff2 != 0 && (s.group == nil || !s.group.hasConns) {
					return result
				}
				continue
			}
			if !s.connected && s.reusePort && s.group != nil {
				var sel []int
				for _, x := range s.group.members {
					if !x.connected {
						sel = append(sel, x.id)
					}
				}
				if len(sel) > 0 {
					slices.Sort(sel)
					result = sel
					if f&featDiff2 != 0 && !s.group.hasConns {
						return result
					}
					continue
				}
			}
			result = []int{s.id}
		}
		return result
	}
	wild := any4
	if !v4 {
		wild = any6
	}
	if r := scan(m.secondary(dst.Addr(), dst.Port(), f), dst.Addr()); r != nil {
		return r
	}
	if r := scan(m.secondary(any4, dst.Port(), f), wild); r != nil {
		return r
	}
	if f&featPlaceholderFallback != 0 {
		best, badness := -1, 0
		for _, s := range m.primary(dst.Port(), f) {
			if sc := score(s, dst.Addr()); sc > badness {
				best, badness = s.id, sc
			}
		}
		if best >= 0 {
			return []int{best}
		}
	}
	return nil
}
