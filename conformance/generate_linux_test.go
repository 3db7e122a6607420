//go:build linux

package conformance

import (
	"math/rand/v2"
	"net/netip"
	"slices"
)

// gen makes the ops of a scenario one at a time, looking at the runner's
// state (which sockets are open and connected) so that most ops matter.
type gen struct {
	rng    *rand.Rand
	e      *env
	nextID int
	filled bool
}

func (g *gen) pick(n int) int { return g.rng.IntN(n) }

func (g *gen) chance(pct int) bool { return g.rng.IntN(100) < pct }

func (g *gen) next(r *runner) []op {
	open := r.sortedSocks()
	w := g.pick(100)
	switch {
	case len(open) == 0 || w < 30:
		return []op{g.bindOp(r, open)}
	case w < 40:
		s := open[g.pick(len(open))]
		if s.connected && g.chance(60) {
			s = open[g.pick(len(open))] // prefer unconnected ones, a little
		}
		return []op{{kind: opConnect, id: s.id, peer: g.peerFor(s)}}
	case w < 47:
		return []op{{kind: opClose, id: open[g.pick(len(open))].id}}
	case w < 49 && !g.filled:
		return g.fill()
	case w < 52 && g.e.bare4 >= 0:
		return g.connectBare(open)
	case w < 56:
		return g.disconnectOps(open)
	case w < 59 && g.e.root:
		return g.setDevOps(open)
	case w < 61:
		return g.groupDisconnect()
	}
	return []op{g.sendOp(r, open)}
}

// disconnectOps disconnects a socket, mostly a connected one, and sends it
// datagrams from addresses other than its old peer's: a disconnected
// socket takes datagrams from anyone, and an IPv6 one in Linux only from
// its old peer's address (deliberate difference 7).
func (g *gen) disconnectOps(open []*rsock) []op {
	s := open[g.pick(len(open))]
	var conn []*rsock
	for _, x := range open {
		if x.connected {
			conn = append(conn, x)
		}
	}
	if len(conn) > 0 && g.chance(80) {
		s = conn[g.pick(len(conn))]
	}
	ops := []op{{kind: opDisconnect, id: s.id}}
	for range 1 + g.pick(2) {
		if o, ok := g.sendTo(s, s.remote.Addr().Unmap()); ok {
			ops = append(ops, o)
		}
	}
	return ops
}

// sendTo makes a datagram to s at the address it has once disconnected
// (or never connected), from a peer whose address is not avoid.
func (g *gen) sendTo(s *rsock, avoid netip.Addr) (op, bool) {
	fam6 := s.spec.addr.Is6() && !s.spec.addr.Is4In6() && (s.v6only || g.chance(50))
	if fam6 && len(g.e.dst6) == 0 {
		fam6 = false
	}
	if !fam6 && s.v6only {
		return op{}, false
	}
	var dst netip.Addr
	switch a := s.spec.addr; {
	case a == any4 || a == any6 || s.local.Addr().Unmap().IsUnspecified():
		if fam6 {
			dst = g.weighted(g.e.dst6)
		} else {
			dst = g.arrivingOn(0)
		}
	case a.Is4In6():
		dst = s.local.Addr().Unmap() // ::ffff:0.0.0.0 keeps the source a connect gave it
	default:
		dst = a
	}
	if _, ok := g.e.arrive[dst]; !ok {
		return op{}, false
	}
	var cands []int
	for i, p := range g.e.peers {
		if p.addr.Addr().Is6() == dst.Is6() && p.addr.Addr() != avoid {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return op{}, false
	}
	return op{kind: opSend, peer: cands[g.pick(len(cands))], dst: netip.AddrPortFrom(dst, s.spec.port)}, true
}

// setDevOps binds a socket to a device after bind (sometimes the device it
// has, which Linux rehashes all the same), mostly a connected or a
// disconnected one, and sends it a datagram from its peer: SO_BINDTODEVICE
// moves a socket's 4-tuple hash entry to its current 4-tuple.
func (g *gen) setDevOps(open []*rsock) []op {
	var pref []*rsock
	for _, x := range open {
		if x.connected || x.disconnected {
			pref = append(pref, x)
		}
	}
	s := open[g.pick(len(open))]
	if len(pref) > 0 && g.chance(75) {
		s = pref[g.pick(len(pref))]
	}
	dev := s.dev
	switch w := g.pick(100); {
	case w < 25:
		dev = 0
	case w < 65:
		dev = g.device(s.spec.addr)
	}
	ops := []op{{kind: opSetDev, id: s.id, dev: dev}}
	peer := -1
	switch {
	case s.connected:
		peer = g.peerIndex(s.remote)
	case s.disconnected:
		peer = g.peerIndex(s.oldPeer)
	}
	if peer >= 0 && !s.local.Addr().Unmap().IsUnspecified() {
		dst := netip.AddrPortFrom(s.local.Addr().Unmap(), s.local.Port())
		if g.e.peers[peer].addr.Addr().Is4() == dst.Addr().Is4() {
			if _, ok := g.e.arrive[dst.Addr()]; ok {
				ops = append(ops, op{kind: opSend, peer: peer, dst: dst})
			}
		}
	}
	return ops
}

// groupDisconnect binds two or three SO_REUSEPORT sockets with the same
// options, connects one and disconnects it, then sends datagrams from
// several peers: Linux leaves the socket out of every group (deliberate
// difference 6).
func (g *gen) groupDisconnect() []op {
	b := bindSpec{port: g.port(), reusePort: true, reuseAddr: g.chance(50), owner: g.e.uid}
	fam6 := len(g.e.dst6) > 0 && g.chance(40)
	switch w := g.pick(100); {
	case w < 50 && fam6:
		b.addr = any6
		b.v6only = g.chance(50)
	case w < 50:
		b.addr = any4
	case fam6:
		b.addr = g.weighted(g.e.dst6)
	default:
		b.addr = g.weighted(g.e.bind4[1:])
	}
	var ops []op
	ids := []int{}
	for range 2 + g.pick(2) {
		ids = append(ids, g.nextID)
		ops = append(ops, op{kind: opBind, id: g.nextID, bind: b})
		g.nextID++
	}
	a := ids[g.pick(len(ids))]
	ops = append(ops, op{kind: opConnect, id: a, peer: g.peerOfFamily(b.addr.Is6() && (b.v6only || !b.addr.IsUnspecified()))},
		op{kind: opDisconnect, id: a})
	dst := b.addr
	if dst.IsUnspecified() {
		if b.v6only {
			dst = g.weighted(g.e.dst6)
		} else {
			dst = g.arrivingOn(0)
		}
	}
	for range 3 {
		ops = append(ops, op{kind: opSend, peer: g.peerOfFamily(dst.Is6()), dst: netip.AddrPortFrom(dst, b.port)})
	}
	return ops
}

func (g *gen) port() uint16 {
	if g.chance(75) {
		return g.e.ports[0]
	}
	return g.e.ports[g.pick(len(g.e.ports))]
}

func (g *gen) owner() uint32 {
	if g.e.root && g.chance(25) {
		return 1000
	}
	return g.e.uid
}

func (g *gen) device(addr netip.Addr) int {
	if !g.e.root || g.chance(60) {
		return 0
	}
	// Specific IPv6 and v4-mapped binds need the address on the device
	// (else EADDRNOTAVAIL): mostly pick the owner.
	if addr.Is6() && addr != any6 && addr != mappedAny && g.chance(80) {
		if d, ok := g.e.arrive[addr.Unmap()]; ok {
			return d
		}
		if addr.Unmap().Is4() {
			return g.e.devs[0].ifindex
		}
	}
	w := g.pick(100)
	switch {
	case w < 55 || len(g.e.devs) == 1:
		return g.e.devs[0].ifindex
	case w < 75:
		return g.e.devs[1].ifindex
	case w < 88:
		return g.e.devs[2].ifindex
	case w < 94 && g.e.nov4 != 0:
		return g.e.nov4
	case g.e.nov6 != 0:
		return g.e.nov6
	}
	return g.e.devs[len(g.e.devs)-1].ifindex
}

// connectBare binds a wildcard socket and connects it through a device
// without an address of the peer's family: an IPv4 connect that keeps the
// wildcard, or an IPv6 one that fails with EADDRNOTAVAIL. The socket is
// bound to that device, to none, or, for an IPv4 peer, to lo, whose
// addresses have host scope, which routing does not lend a peer beyond it:
// the wildcard stays too.
//
// Such a connect does not rehash the socket, nor give it the 4-tuple
// precedence, so ties between two of them go by bind order, not by connect
// order. Sometimes, then, a twin binds first and the two connect to the
// same peer in the other order, and the peer sends a datagram; or an open
// socket that kept the wildcard connects again.
func (g *gen) connectBare(open []*rsock) []op {
	var kept []*rsock
	for _, s := range open {
		if s.connected && s.local.Addr().Unmap().IsUnspecified() {
			kept = append(kept, s)
		}
	}
	if len(kept) > 0 && g.chance(15) {
		s := kept[g.pick(len(kept))]
		return []op{{kind: opConnect, id: s.id, peer: g.peerIndex(s.remote)}}
	}
	b := bindSpec{port: g.port(), reuseAddr: g.chance(70), reusePort: g.chance(30), owner: g.owner()}
	peer := g.e.bare4
	switch w := g.pick(100); {
	case w < 45:
		b.addr = any4
	case w < 65:
		b.addr = any6
	case w < 75:
		b.addr = mappedAny
	default:
		b.addr, b.v6only, peer = any6, g.chance(50), g.e.bare6
	}
	switch w := g.pick(100); {
	case w < 50 && peer == g.e.bare4:
		b.dev = g.e.nov4
	case w < 50:
		b.dev = g.e.nov6
	case w < 65 && peer == g.e.bare4:
		b.dev = g.e.devs[0].ifindex
	}
	if peer == g.e.bare4 && b.dev == g.e.nov4 && g.chance(50) {
		// Bound to nov4, any IPv4 peer is reached through it.
		peer = g.peerOfFamily(false)
	}
	a := g.nextID
	g.nextID++
	if peer == g.e.bare6 || !g.chance(30) {
		return []op{{kind: opBind, id: a, bind: b}, {kind: opConnect, id: a, peer: peer}}
	}
	b.reuseAddr = true
	twin := g.nextID
	g.nextID++
	dst := netip.AddrPortFrom(g.arrivingOn(b.dev), b.port)
	return []op{{kind: opBind, id: a, bind: b}, {kind: opBind, id: twin, bind: b},
		{kind: opConnect, id: twin, peer: peer}, {kind: opConnect, id: a, peer: peer},
		{kind: opSend, peer: peer, dst: dst}}
}

// peerIndex returns the index of the peer a socket connected to remote
// reaches.
func (g *gen) peerIndex(remote netip.AddrPort) int {
	return slices.IndexFunc(g.e.peers, func(p peer) bool {
		return p.addr == netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	})
}

// peerOfFamily picks a peer of the family (fam6: IPv6).
func (g *gen) peerOfFamily(fam6 bool) int {
	var cands []int
	for i, p := range g.e.peers {
		if p.addr.Addr().Is6() == fam6 {
			cands = append(cands, i)
		}
	}
	return cands[g.pick(len(cands))]
}

// weighted picks from pool, the first two twice as likely as the others.
func (g *gen) weighted(pool []netip.Addr) netip.Addr {
	i := g.pick(len(pool) + 2)
	if i >= len(pool) {
		i = (i - len(pool)) % len(pool)
	}
	return pool[i]
}

func (g *gen) bindOp(r *runner, open []*rsock) op {
	id := g.nextID
	g.nextID++
	var b bindSpec
	switch {
	case len(open) > 0 && g.chance(25):
		// Same options as an open socket, one of them sometimes changed:
		// groups, ties and near-conflicts.
		b = open[g.pick(len(open))].spec
		switch g.pick(6) {
		case 0:
			b.reuseAddr = !b.reuseAddr
		case 1:
			b.reusePort = !b.reusePort
		case 2:
			b.owner = g.owner()
		case 3:
			b.dev = g.device(b.addr)
		}
	default:
		b.port = g.port()
		fam6 := g.chance(50)
		switch {
		case len(open) > 0 && g.chance(30):
			// The address of an open socket, or its other-family form.
			a := open[g.pick(len(open))].spec.addr
			b.port = open[g.pick(len(open))].spec.port
			switch {
			case a.Is4() && fam6:
				a = netip.AddrFrom16(a.As16())
			case a.Is4In6() && !fam6:
				a = a.Unmap()
			case a == any6 && !fam6:
				a = any4
			case a == any4 && fam6:
				a = any6
			}
			b.addr = a
		case fam6:
			b.addr = g.weighted(g.e.bind6)
		default:
			b.addr = g.weighted(g.e.bind4)
		}
		b.reuseAddr = g.chance(40)
		b.reusePort = g.chance(40)
		b.owner = g.owner()
		b.dev = g.device(b.addr)
		b.v6only = b.addr.Is6() && g.chance(25)
	}
	if b.addr.Is4() {
		b.v6only = false
	}
	return op{kind: opBind, id: id, bind: b}
}

// fill binds 11 to 13 sockets on distinct addresses of one port, so that its
// primary chain is longer than 10 (the kernel's and the hybrid rule's
// threshold).
func (g *gen) fill() []op {
	g.filled = true
	pool := g.e.fillers4
	if len(g.e.fillers6) > 0 && g.chance(35) {
		pool = g.e.fillers6
	}
	port := g.port()
	n := 11 + g.pick(3)
	if n > len(pool) {
		n = len(pool)
	}
	var ops []op
	for i := 0; i < n; i++ {
		b := bindSpec{addr: pool[i], port: port, reuseAddr: g.chance(30), reusePort: g.chance(30), owner: g.e.uid}
		ops = append(ops, op{kind: opBind, id: g.nextID, bind: b})
		g.nextID++
	}
	return ops
}

// peerFor picks a peer for socket s to connect to.
func (g *gen) peerFor(s *rsock) int {
	var cands []int
	for i, p := range g.e.peers {
		if p.addr.Addr().Is4() && (!s.spec.addr.Is6() || !s.v6only || g.chance(10)) || p.addr.Addr().Is6() && s.spec.addr.Is6() {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return 0
	}
	return cands[g.pick(len(cands))]
}

func (g *gen) sendOp(r *runner, open []*rsock) op {
	// A datagram from the peer of a connected socket, to its address.
	if g.chance(30) {
		var conn []*rsock
		for _, s := range open {
			if s.connected {
				conn = append(conn, s)
			}
		}
		if len(conn) > 0 {
			s := conn[g.pick(len(conn))]
			if s.spec.addr.Is6() && !s.v6only && s.local.Addr().Is6() && !s.local.Addr().Is4In6() && g.chance(50) {
				// A dual-stack socket connected to an IPv6 peer keeps the
				// IPv4 placeholder address 127.0.0.6 (and no IPv4 peer
				// address): IPv4 datagrams to it with the peer's port.
				return op{kind: opSend, peer: g.peerOfFamily(false), dst: netip.AddrPortFrom(placeholder, s.local.Port())}
			}
			if i := g.peerIndex(s.remote); i >= 0 {
				dst := netip.AddrPortFrom(s.local.Addr().Unmap(), s.local.Port())
				if dst.Addr().IsUnspecified() {
					// It kept the wildcard: any address that arrives
					// on its device.
					dst = netip.AddrPortFrom(g.arrivingOn(s.spec.dev), dst.Port())
				}
				if g.e.peers[i].addr.Addr().Is4() && dst.Addr().Is6() {
					// Connected again, from an IPv6 peer to an IPv4
					// one: it keeps its IPv6 address, and IPv4 reaches
					// it only at the placeholder.
					dst = netip.AddrPortFrom(placeholder, s.local.Port())
				}
				if _, ok := g.e.arrive[dst.Addr()]; ok {
					return op{kind: opSend, peer: i, dst: dst}
				}
			}
		}
	}
	port := g.port()
	if len(open) > 0 && g.chance(85) {
		port = open[g.pick(len(open))].spec.port
	}
	v6 := len(g.e.dst6) > 0 && g.chance(40)
	var dst netip.Addr
	if len(open) > 0 && g.chance(50) {
		a := open[g.pick(len(open))].spec.addr.Unmap()
		if _, ok := g.e.arrive[a]; ok {
			dst, v6 = a, a.Is6()
		}
	}
	if !dst.IsValid() {
		if v6 {
			dst = g.weighted(g.e.dst6)
		} else {
			dst = g.weighted(g.e.dst4)
		}
	}
	return op{kind: opSend, peer: g.peerOfFamily(v6), dst: netip.AddrPortFrom(dst, port)}
}

// arrivingOn picks an IPv4 destination whose datagrams arrive on device
// dev, any when dev is 0.
func (g *gen) arrivingOn(dev int) netip.Addr {
	var cands []netip.Addr
	for _, a := range g.e.dst4 {
		if dev == 0 || g.e.arrive[a] == dev {
			cands = append(cands, a)
		}
	}
	if len(cands) == 0 {
		return g.weighted(g.e.dst4)
	}
	return cands[g.pick(len(cands))]
}
