// Package suite holds the benchmark scenarios of udpdemux: the socket
// table shapes of the 2009 netdev discussions, the fixtures that load a
// shape into each contender (udpdemux under its three strategies, gVisor's
// netstack, and a plain Go map as the floor), and the benchmark functions
// that both the go test benchmarks of the bench module and the udpbench
// runner use.
//
// Every fixture is checked before it is timed: each contender must find,
// for every datagram it is checked on, the socket that the shape says
// should receive it.
package suite

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// MaxLookups caps the number of distinct datagrams a lookup set holds; the
// benchmarks cycle through them.
const MaxLookups = 1 << 16

// Sock is one socket of a shape.
type Sock struct {
	// Local is the address and port the socket is bound to.
	Local netip.AddrPort
	// ReuseAddr sets SO_REUSEADDR.
	ReuseAddr bool
	// ReusePort sets SO_REUSEPORT (all with the same owner).
	ReusePort bool
	// Remote is the peer of a connected socket, the zero AddrPort for an
	// unconnected one.
	Remote netip.AddrPort
	// Src is the local address that routing chose when a socket bound to a
	// wildcard address connected; the socket takes it as its address.
	Src netip.Addr
	// Device is SO_BINDTODEVICE, an interface index (0 for none). The
	// lookups of every shape arrive on interface 1. Only udpdemux's
	// fixtures bind devices.
	Device int
}

// Key returns the socket's local address and port after connect: Src
// replaces a wildcard address.
func (s *Sock) Key() netip.AddrPort {
	if s.Src.IsValid() {
		return netip.AddrPortFrom(s.Src, s.Local.Port())
	}
	return s.Local
}

// Connected reports whether the socket has a peer.
func (s *Sock) Connected() bool { return s.Remote.IsValid() }

// Datagram is one lookup: a datagram from Src to Dst, which the socket
// Socks[Want] of its shape must receive, or, when Want is AnyMember, any
// member of the shape's SO_REUSEPORT group (each contender spreads flows
// over the members with a hash of its own).
type Datagram struct {
	Src, Dst netip.AddrPort
	Want     int32
}

// AnyMember is the Want of a datagram that any member of a SO_REUSEPORT
// group may receive.
const AnyMember int32 = -2

// accepts reports whether a lookup that found the socket with index got
// answers d.
func (d *Datagram) accepts(got int32) bool {
	if d.Want == AnyMember {
		return got >= 0
	}
	return got == d.Want
}

// Set is a named list of datagrams to look up.
type Set struct {
	Name string
	D    []Datagram
}

// Shape is a table to build and the datagrams to look up in it.
type Shape struct {
	// Name describes the shape, e.g. "same-port/4096".
	Name string
	// Slots is the number of slots of udpdemux's tables for this shape.
	Slots int
	// Socks are bound in order.
	Socks []Sock
	// Sets are the lookups, each a list of datagrams in random order.
	Sets []Set
	// Churn are sockets that a concurrent writer may bind and close in
	// turn (one at a time) without changing the answer to any datagram of
	// Sets. Shapes that do not support a writer leave it empty.
	Churn []Sock
}

// Connected reports whether any socket of the shape is connected.
func (sh *Shape) Connected() bool {
	for i := range sh.Socks {
		if sh.Socks[i].Connected() {
			return true
		}
	}
	return false
}

// SetIndex returns the index of the set named name, or -1.
func (sh *Shape) SetIndex(name string) int {
	for i := range sh.Sets {
		if sh.Sets[i].Name == name {
			return i
		}
	}
	return -1
}

// The names of the shapes' datagram sets.
const (
	SetBound    = "bound"    // to the bound sockets
	SetWildcard = "wildcard" // to addresses only a wildcard socket serves
	SetQueries  = "queries"  // the mixed shape's queries to the service
	SetReplies  = "replies"  // the mixed shape's replies to its clients
	SetPeers    = "peers"    // the mixed shape's connected peers
	SetMix      = "mix"      // the mixed shape's blend of the three
)

// Port of the same-port shape, and of the mixed shape's service.
const (
	SamePortPort = 4242
	DNSPort      = 53
)

var any4 = netip.IPv4Unspecified()

// addr4 returns 10.0.0.0 + i; i must stay below 1<<24.
func addr4(hi byte, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{hi, byte(i >> 16), byte(i >> 8), byte(i)})
}

// randomSrc returns a random source address and port, from 100.64.0.0/10,
// which no shape binds.
func randomSrc(r *rand.Rand) netip.AddrPort {
	a := netip.AddrFrom4([4]byte{100, byte(64 + r.IntN(64)), byte(r.IntN(256)), byte(1 + r.IntN(254))})
	return netip.AddrPortFrom(a, uint16(1024+r.IntN(64512)))
}

// sample returns min(n, MaxLookups) distinct indexes below n in random
// order.
func sample(r *rand.Rand, n int) []int {
	p := r.Perm(n)
	if len(p) > MaxLookups {
		p = p[:MaxLookups]
	}
	return p
}

// toBound returns datagrams from random sources to a random sample of the
// sockets of sh, in random order.
func toBound(r *rand.Rand, sh *Shape, n int) []Datagram {
	idx := sample(r, n)
	ds := make([]Datagram, len(idx))
	for j, i := range idx {
		ds[j] = Datagram{Src: randomSrc(r), Dst: sh.Socks[i].Key(), Want: int32(i)}
	}
	return ds
}

// SamePort is the shape of the November 2009 RFC: n sockets on one port
// with distinct IPv4 addresses (10.0.0.1, 10.0.0.2, ...), and one more
// socket on 0.0.0.0 at the same port; all set SO_REUSEADDR, without which
// Linux refuses the wildcard bind. Its sets are "bound" (datagrams to
// the bound addresses) and "wildcard" (datagrams to addresses that only
// the wildcard socket serves).
func SamePort(n, slots int, seed uint64) *Shape {
	r := rand.New(rand.NewPCG(seed, 1))
	sh := &Shape{Name: fmt.Sprintf("same-port/%d", n), Slots: slots, Socks: make([]Sock, n+1)}
	for i := range n {
		sh.Socks[i] = Sock{Local: netip.AddrPortFrom(addr4(10, i+1), SamePortPort), ReuseAddr: true}
	}
	sh.Socks[n] = Sock{Local: netip.AddrPortFrom(any4, SamePortPort), ReuseAddr: true}
	wild := make([]Datagram, min(n, 4096))
	for j := range wild {
		// 172.16.0.0/12 is not bound.
		dst := netip.AddrPortFrom(addr4(172, 16<<16|r.IntN(1<<16)), SamePortPort)
		wild[j] = Datagram{Src: randomSrc(r), Dst: dst, Want: int32(n)}
	}
	sh.Sets = []Set{{SetBound, toBound(r, sh, n)}, {SetWildcard, wild}}
	// The writer binds 11.0.0.0/16 on the same port: the same primary
	// chain, other secondary slots.
	for i := range 1024 {
		sh.Churn = append(sh.Churn, Sock{Local: netip.AddrPortFrom(addr4(11, i+1), SamePortPort), ReuseAddr: true})
	}
	return sh
}

// DistinctPorts is the shape of the reply to that RFC: n sockets on
// 0.0.0.0 at distinct ports (100, 101, ...); n is at most 65 000. Its set
// "bound" sends datagrams to 10.0.0.1 at the bound ports.
func DistinctPorts(n, slots int, seed uint64) *Shape {
	if n > 65000 {
		panic("suite: DistinctPorts: more than 65000 ports")
	}
	r := rand.New(rand.NewPCG(seed, 2))
	sh := &Shape{Name: fmt.Sprintf("distinct-ports/%d", n), Slots: slots, Socks: make([]Sock, n)}
	for i := range n {
		sh.Socks[i] = Sock{Local: netip.AddrPortFrom(any4, uint16(100+i))}
	}
	idx := sample(r, n)
	ds := make([]Datagram, len(idx))
	dst := addr4(10, 1)
	for j, i := range idx {
		ds[j] = Datagram{Src: randomSrc(r), Dst: netip.AddrPortFrom(dst, sh.Socks[i].Local.Port()), Want: int32(i)}
	}
	sh.Sets = []Set{{SetBound, ds}}
	// The writer binds the ports from 65200 up, which the shape leaves free.
	for p := 65200; p <= 65535; p++ {
		sh.Churn = append(sh.Churn, Sock{Local: netip.AddrPortFrom(any4, uint16(p))})
	}
	return sh
}

// PerPort is the sweep's shape: total sockets, perPort of them on each
// port (ports 1000, 1001, ...), at distinct IPv4 addresses 10.0.0.1,
// 10.0.0.2, ... on every port. Its set "bound" sends datagrams to the
// bound addresses.
func PerPort(total, perPort, slots int, seed uint64) *Shape {
	ports := max(total/perPort, 1)
	if ports > 60000 {
		panic("suite: PerPort: too many ports")
	}
	r := rand.New(rand.NewPCG(seed, 3))
	sh := &Shape{Name: fmt.Sprintf("per-port/%d", perPort), Slots: slots, Socks: make([]Sock, 0, ports*perPort)}
	for p := range ports {
		for a := range perPort {
			sh.Socks = append(sh.Socks, Sock{Local: netip.AddrPortFrom(addr4(10, a+1), uint16(1000+p))})
		}
	}
	sh.Sets = []Set{{SetBound, toBound(r, sh, len(sh.Socks))}}
	return sh
}

// Mixed addresses.
var (
	upstreams = []netip.Addr{addr4(198, 51<<16|100<<8|1), addr4(198, 51<<16|100<<8|2), addr4(198, 51<<16|100<<8|3), addr4(198, 51<<16|100<<8|4)}
)

// Mixed is a DNS forwarder: 16 service sockets on 10.0.0.1…16 port 53
// (SO_REUSEADDR); 8 more sockets on 10.0.0.1…8 port 53 (SO_REUSEADDR),
// each connected to one client (192.0.2.101…108 port 5353); and clients
// sockets bound to 0.0.0.0 at distinct random ports of 10000–65535 (as
// bind(0) would choose them in that range) and connected to one of four
// upstream resolvers (198.51.100.1…4 port 53), taking 10.0.0.1…16 as their
// source address. Past 55 536 clients the ports are shared, with
// SO_REUSEADDR, each client keeping a 4-tuple of its own.
//
// Its sets are "queries" (from random clients to the service addresses),
// "replies" (from the upstreams to the client sockets), "peers" (from the
// 8 connected clients) and "mix" (50 % queries, 45 % replies, 5 % peers).
func Mixed(clients, slots int, seed uint64) *Shape {
	r := rand.New(rand.NewPCG(seed, 4))
	sh := &Shape{Name: fmt.Sprintf("mixed/%d", clients), Slots: slots}
	for i := range 16 {
		sh.Socks = append(sh.Socks, Sock{Local: netip.AddrPortFrom(addr4(10, i+1), DNSPort), ReuseAddr: true})
	}
	for i := range 8 {
		peer := netip.AddrPortFrom(addr4(192, 2<<8|101+i), 5353)
		sh.Socks = append(sh.Socks, Sock{Local: netip.AddrPortFrom(addr4(10, i+1), DNSPort), ReuseAddr: true, Remote: peer})
	}
	// Up to one client per port of 10000–65535, each port chosen at
	// random; beyond that, the ports are shared: the k-th round of
	// clients reuses the first round's ports (all clients then set
	// SO_REUSEADDR), with other source addresses and upstreams, so that
	// every client keeps a 4-tuple of its own.
	const low, high = 10000, 65535
	nports := min(clients, high-low+1)
	if clients > 64*nports {
		panic("suite: Mixed: too many clients")
	}
	shared := clients > nports
	ports := make([]uint16, 0, nports)
	used := make(map[int]bool, nports)
	for len(ports) < nports {
		p := low + r.IntN(high-low+1)
		if used[p] {
			continue
		}
		used[p] = true
		ports = append(ports, uint16(p))
	}
	first := len(sh.Socks)
	for i := range clients {
		round := i / nports
		sh.Socks = append(sh.Socks, Sock{
			Local:     netip.AddrPortFrom(any4, ports[i%nports]),
			ReuseAddr: shared,
			Remote:    netip.AddrPortFrom(upstreams[(i+round/16)%len(upstreams)], DNSPort),
			Src:       addr4(10, 1+(i+round)%16),
		})
	}
	queries := make([]Datagram, 4096)
	for j := range queries {
		i := r.IntN(16)
		queries[j] = Datagram{Src: randomSrc(r), Dst: sh.Socks[i].Local, Want: int32(i)}
	}
	replies := make([]Datagram, 0, min(clients, MaxLookups))
	for _, k := range sample(r, clients) {
		s := &sh.Socks[first+k]
		replies = append(replies, Datagram{Src: s.Remote, Dst: s.Key(), Want: int32(first + k)})
	}
	peers := make([]Datagram, 256)
	for j := range peers {
		i := 16 + r.IntN(8)
		peers[j] = Datagram{Src: sh.Socks[i].Remote, Dst: sh.Socks[i].Local, Want: int32(i)}
	}
	mix := make([]Datagram, 0, 8192)
	for range cap(mix) {
		switch x := r.IntN(100); {
		case x < 50:
			mix = append(mix, queries[r.IntN(len(queries))])
		case x < 95 && len(replies) > 0:
			mix = append(mix, replies[r.IntN(len(replies))])
		default:
			mix = append(mix, peers[r.IntN(len(peers))])
		}
	}
	sh.Sets = []Set{{SetQueries, queries}, {SetReplies, replies}, {SetPeers, peers}, {SetMix, mix}}
	return sh
}
