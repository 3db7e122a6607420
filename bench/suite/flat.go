package suite

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// Sets of the shapes for the growing tables.
const (
	SetKnown   = "known"   // from the peers of connected sockets
	SetUnknown = "unknown" // from other sources, to the listener
	SetFlows   = "flows"   // from random sources, to a SO_REUSEPORT group
	SetVictim  = "victim"  // to the one socket on the attacked port
)

// ConnectedPort is the port of the connected shape.
const ConnectedPort = 4433

// connAddr is the local address of the connected shape.
var connAddr = addr4(10, 1)

// peer returns the i-th peer of the connected shapes: 172.16.0.0/12 plus
// i, port 40000; i must stay below 1<<20.
func peer(i int) netip.AddrPort {
	return netip.AddrPortFrom(addr4(172, 16<<16+i), 40000)
}

// Connected is the shape of a QUIC or DNS server that connects a socket
// per client: a listener on 10.0.0.1:4433 (socket 0) and n sockets on the
// same address and port, each connected to a peer of its own; all set
// SO_REUSEADDR, as such servers do to bind the connected sockets. Its sets
// are "known" (from the peers) and "unknown" (from other sources, which
// the listener receives). Its churn holds the next 1 024 connected
// sockets, for binding and closing at the shape's size.
func Connected(n int, seed uint64) *Shape {
	if n+1024 > 1<<20 {
		panic("suite: Connected: too many sockets")
	}
	r := rand.New(rand.NewPCG(seed, 5))
	local := netip.AddrPortFrom(connAddr, ConnectedPort)
	sh := &Shape{Name: fmt.Sprintf("connected/%d", n), Socks: make([]Sock, n+1)}
	sh.Socks[0] = Sock{Local: local, ReuseAddr: true}
	for i := 1; i <= n; i++ {
		sh.Socks[i] = Sock{Local: local, ReuseAddr: true, Remote: peer(i)}
	}
	known := make([]Datagram, 0, min(n, MaxLookups))
	for _, i := range sample(r, n) {
		known = append(known, Datagram{Src: peer(i + 1), Dst: local, Want: int32(i + 1)})
	}
	unknown := make([]Datagram, 4096)
	for j := range unknown {
		unknown[j] = Datagram{Src: randomSrc(r), Dst: local, Want: 0}
	}
	sh.Sets = []Set{{SetKnown, known}, {SetUnknown, unknown}}
	for i := n + 1; i <= n+1024; i++ {
		sh.Churn = append(sh.Churn, Sock{Local: local, ReuseAddr: true, Remote: peer(i)})
	}
	return sh
}

// ReusePortGroup is n sockets in one SO_REUSEPORT group on 10.0.0.1:4242.
// Its set "flows" sends datagrams from random sources, which any member
// may receive.
func ReusePortGroup(n int, seed uint64) *Shape {
	r := rand.New(rand.NewPCG(seed, 6))
	local := netip.AddrPortFrom(addr4(10, 1), SamePortPort)
	sh := &Shape{Name: fmt.Sprintf("reuseport-group/%d", n), Socks: make([]Sock, n)}
	for i := range sh.Socks {
		sh.Socks[i] = Sock{Local: local, ReusePort: true}
	}
	flows := make([]Datagram, min(max(n, 4096), MaxLookups))
	for j := range flows {
		flows[j] = Datagram{Src: randomSrc(r), Dst: local, Want: AnyMember}
	}
	sh.Sets = []Set{{SetFlows, flows}}
	return sh
}

// Grouped reports whether the shape is one SO_REUSEPORT group.
func (sh *Shape) Grouped() bool {
	return len(sh.Socks) > 0 && sh.Socks[0].ReusePort
}

// VictimPort is the attacked port of the aliasing shape, and AliasPort
// the attackers' port: it differs by 4 096, so with a table of 4 096 (or
// any power of two up to 4 096) slots it shares every slot index with
// VictimPort unless the index mixes the port with a secret.
const (
	VictimPort = 53
	AliasPort  = VictimPort + 4096
)

// Aliased is the port-aliasing attack: a victim socket on 10.0.0.1:53
// (socket 0), and attackers sockets on the same address at port
// 53+4096, all with SO_REUSEADDR, or, with group, all in one SO_REUSEPORT
// group. Its set "victim" sends datagrams from random sources to the
// victim. With attackers 0 it is the baseline.
func Aliased(attackers int, group bool, seed uint64) *Shape {
	r := rand.New(rand.NewPCG(seed, 7))
	victim := netip.AddrPortFrom(addr4(10, 1), VictimPort)
	kind := "reuseaddr"
	if group {
		kind = "reuseport-group"
	}
	sh := &Shape{Name: fmt.Sprintf("aliased-%s/%d", kind, attackers), Socks: make([]Sock, attackers+1)}
	sh.Socks[0] = Sock{Local: victim}
	for i := 1; i <= attackers; i++ {
		sh.Socks[i] = Sock{Local: netip.AddrPortFrom(addr4(10, 1), AliasPort), ReuseAddr: !group, ReusePort: group}
	}
	ds := make([]Datagram, 4096)
	for j := range ds {
		ds[j] = Datagram{Src: randomSrc(r), Dst: victim, Want: 0}
	}
	sh.Sets = []Set{{SetVictim, ds}}
	return sh
}
