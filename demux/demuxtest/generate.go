package demuxtest

import (
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/internal/model"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = addr(s)
	}
	return out
}

var (
	// bindAddrs are the local addresses that binds draw from; the common
	// ones appear twice.
	bindAddrs = addrs("0.0.0.0", "0.0.0.0", "::", "::", "127.0.0.1", "127.0.0.1", "127.0.0.2",
		"::1", "::1", "::2", "::ffff:127.0.0.1", "::ffff:127.0.0.2", "::ffff:0.0.0.0",
		"fe80::1%1", "fe80::1%2", "fe80::1", "224.0.0.251", "ff02::fb%1")
	// peers4 and peers6 are the peers: connect remotes and lookup sources.
	peers4 = []netip.AddrPort{
		netip.MustParseAddrPort("127.0.0.1:1000"),
		netip.MustParseAddrPort("127.0.0.2:1000"),
		netip.MustParseAddrPort("127.0.0.3:2000"),
		netip.MustParseAddrPort("[::ffff:127.0.0.2]:1000"),
	}
	peers6 = []netip.AddrPort{
		netip.MustParseAddrPort("[::1]:1000"),
		netip.MustParseAddrPort("[::2]:2000"),
		netip.MustParseAddrPort("[fe80::2]:1000"),
	}
	// zoned are link-local peers with a zone, for connect only: the
	// zone binds the socket to that interface.
	zoned = []netip.AddrPort{
		netip.MustParseAddrPort("[fe80::2%1]:1000"),
		netip.MustParseAddrPort("[fe80::2%2]:1000"),
	}
	badRemotes = []netip.AddrPort{
		{},
		netip.MustParseAddrPort("0.0.0.0:1000"),
		netip.MustParseAddrPort("[::]:1000"),
		netip.MustParseAddrPort("127.0.0.1:0"),
	}
	// dsts4 and dsts6 are datagram destinations.
	dsts4 = addrs("127.0.0.1", "127.0.0.2", "127.0.0.6", "::ffff:127.0.0.1", "224.0.0.251")
	dsts6 = addrs("::1", "::2", "fe80::1", "ff02::fb")
	// locals4 and locals6 are the source addresses "routing" chooses for
	// a wildcard socket's connect.
	locals4 = addrs("127.0.0.1", "127.0.0.2", "127.0.0.3")
	locals6 = addrs("::1", "::2")
)

// Generator makes random ops, looking at the model's state so that most of
// them hit live sockets.
type Generator struct {
	rng *rand.Rand
	r   *Runner
	// binds are the indexes of recent successful bind ops, in order, for
	// operations on closed sockets.
	binds []int
}

// NewGenerator returns a generator of ops for r, drawing its choices from
// src.
func NewGenerator(r *Runner, src rand.Source) *Generator {
	return &Generator{rng: rand.New(src), r: r}
}

// Run generates n ops and runs each on the generator's runner as it goes,
// so that each op sees the state the ones before made. It returns the ops
// run; on a mismatch it stops, and the last op returned is the failing one.
func (g *Generator) Run(n int) ([]Op, error) {
	ops := make([]Op, 0, n)
	for i := range n {
		o := g.next(i)
		g.r.chosen = 0
		err := g.r.Step(i, o)
		o.Port0 = g.r.chosen
		ops = append(ops, o)
		if err != nil {
			return ops, err
		}
		if _, ok := g.r.ids[i]; ok && o.Kind == Bind {
			g.binds = append(g.binds, i)
		}
	}
	return ops, nil
}

func pick[T any](g *Generator, s []T) T { return s[g.rng.IntN(len(s))] }

func (g *Generator) chance(p float64) bool { return g.rng.Float64() < p }

// live returns the model's open sockets by id.
func (g *Generator) live() map[int]model.Socket {
	out := map[int]model.Socket{}
	for _, s := range g.r.m.Snapshot() {
		out[s.ID] = s
	}
	return out
}

// next returns op number i.
func (g *Generator) next(i int) Op {
	live := g.live()
	var open, closed []int // bind op indexes
	for _, s := range g.r.m.Snapshot() {
		open = append(open, g.r.bindOp[s.ID])
	}
	if len(g.binds) > 64 {
		g.binds = slices.Delete(g.binds, 0, len(g.binds)-64)
	}
	for _, bi := range g.binds {
		if _, ok := live[g.r.ids[bi]]; !ok {
			closed = append(closed, bi)
		}
	}
	closeP := 0.08
	if len(open) > 40 {
		closeP = 0.3
	}
	switch x := g.rng.Float64(); {
	case len(open) > 0 && x < closeP:
		return Op{Kind: Close, Ref: pick(g, open)}
	case len(closed) > 0 && x < closeP+0.01:
		return Op{Kind: Close, Ref: pick(g, closed)} // EBADF
	case len(closed) > 0 && x < closeP+0.02:
		return Op{Kind: Connect, Ref: pick(g, closed), Remote: pick(g, peers4), Local: pick(g, locals4)} // EBADF
	case len(open) > 0 && x < closeP+0.17:
		bi := pick(g, open)
		return g.connect(bi, live[g.r.ids[bi]])
	case len(open) > 0 && x < closeP+0.21:
		return Op{Kind: Disconnect, Ref: pick(g, open)}
	case len(open) > 0 && x < closeP+0.23:
		return Op{Kind: SetDevice, Ref: pick(g, open), Ifindex: g.rng.IntN(3)}
	case len(closed) > 0 && x < closeP+0.235:
		return Op{Kind: pick(g, []Kind{Disconnect, SetDevice}), Ref: pick(g, closed), Ifindex: 1} // EBADF
	case x < 0.45:
		return Op{Kind: Bind, Opts: g.options(pick(g, ports))}
	case x < 0.55:
		return Op{Kind: Bind, Opts: g.options(0)}
	default:
		kind := Lookup
		if g.chance(0.25) {
			kind = Multicast
		}
		var socks []model.Socket
		for _, s := range live {
			socks = append(socks, s)
		}
		slices.SortFunc(socks, func(a, b model.Socket) int { return a.ID - b.ID })
		return g.lookup(kind, socks)
	}
}

func (g *Generator) options(port uint16) demux.Options {
	o := demux.Options{
		Addr:      pick(g, bindAddrs),
		Port:      port,
		ReuseAddr: g.chance(0.4),
		ReusePort: g.chance(0.4),
		Owner:     uint32(g.rng.IntN(2)),
		V6Only:    g.chance(0.12),
	}
	if g.chance(0.3) {
		o.Device = 1 + g.rng.IntN(2)
	}
	return o
}

// connect makes a connect of the socket of bind op bi, whose model state is
// s. Most are valid; some carry a bad remote, a remote of the wrong family,
// or a missing or wrong local address.
func (g *Generator) connect(bi int, s model.Socket) Op {
	o := Op{Kind: Connect, Ref: bi}
	la := s.Local.Addr()
	is4 := la.Is4()
	mappedLocal := la.Is4In6()
	wild := la.Unmap().IsUnspecified()
	// Choose the peer's family: IPv4 sockets and sockets with a v4-mapped
	// local address talk IPv4, V6Only and other specific IPv6 ones IPv6,
	// "::" either. Some get the other family: EAFNOSUPPORT or
	// ENETUNREACH, except for a "::" socket that a connect to an IPv6 peer
	// gave an IPv6 address, which Linux lets reconnect to an IPv4 peer.
	wrong := g.chance(0.1)
	var peer4 bool
	switch {
	case is4, mappedLocal:
		peer4 = !wrong
	case s.V6Only, !wild:
		peer4 = wrong
	default:
		peer4 = g.chance(0.5)
	}
	if peer4 {
		o.Remote = pick(g, peers4)
	} else {
		o.Remote = pick(g, peers6)
		// A zoned peer for a v4-mapped local address fails in Linux's
		// route lookup, which the table does not model: not made.
		if !mappedLocal && g.chance(0.15) {
			o.Remote = pick(g, zoned)
		}
	}
	if g.chance(0.04) {
		o.Remote = pick(g, badRemotes)
	}
	switch {
	case wild && g.chance(0.15):
		// Missing local: EINVAL. Unspecified: routing found no source,
		// which keeps the wildcard for an IPv4 peer (EADDRNOTAVAIL for an
		// IPv6 one, EINVAL for the other family's).
		o.Local = pick(g, []netip.Addr{{}, netip.IPv4Unspecified(), netip.IPv6Unspecified(), netip.AddrFrom16(netip.IPv4Unspecified().As16())})
		if g.chance(0.5) { // the peer's family, as routing would say it
			o.Local = netip.IPv6Unspecified()
			if peer4 {
				o.Local = netip.IPv4Unspecified()
			}
		}
	case wild && !peer4 && g.chance(0.15):
		// No IPv6 source at all: EADDRNOTAVAIL.
		o.Local = netip.IPv6Unspecified()
	case wild && peer4:
		o.Local = pick(g, locals4)
		if !is4 && g.chance(0.5) {
			o.Local = netip.AddrFrom16(o.Local.As16()) // v4-mapped form
		}
	case wild:
		o.Local = pick(g, locals6)
	case g.chance(0.6), mappedLocal != peer4 && !is4:
		// zero local: keep the bound address (always when the peer is
		// of the other family, where "equal" would be ambiguous)
	case g.chance(0.85):
		o.Local = la
		if mappedLocal && g.chance(0.5) {
			o.Local = la.Unmap()
		}
	default:
		// A different address: EINVAL.
		o.Local = pick(g, append(slices.Clone(locals4), locals6...))
	}
	return o
}

// lookup makes a lookup; half of them aim at a live socket.
func (g *Generator) lookup(kind Kind, socks []model.Socket) Op {
	o := Op{Kind: kind, Ifindex: g.rng.IntN(4)}
	if len(socks) == 0 || g.chance(0.5) {
		port := pick(g, ports)
		if g.chance(0.3) {
			port = portLow + uint16(g.rng.IntN(portHigh-portLow+1))
		}
		if g.chance(0.5) {
			o.Dst = netip.AddrPortFrom(pick(g, dsts4), port)
			o.Src = pick(g, peers4)
		} else {
			o.Dst = netip.AddrPortFrom(pick(g, dsts6), port)
			o.Src = pick(g, peers6)
		}
		return o
	}
	s := pick(g, socks)
	la := s.Local.Addr()
	var dst netip.Addr
	switch {
	case la == netip.IPv4Unspecified() || la == netip.AddrFrom16(netip.IPv4Unspecified().As16()):
		dst = pick(g, dsts4)
	case la == netip.IPv6Unspecified():
		dst = pick(g, append(slices.Clone(dsts4), dsts6...))
	case la.Is4In6() && g.chance(0.5):
		dst = la.Unmap()
	default:
		dst = la
	}
	o.Dst = netip.AddrPortFrom(dst, s.Local.Port())
	switch {
	case s.Remote.IsValid() && g.chance(0.7):
		o.Src = s.Remote
		if s.Remote.Addr().Is4In6() && g.chance(0.5) {
			o.Src = netip.AddrPortFrom(s.Remote.Addr().Unmap(), s.Remote.Port())
		}
		if o.Src.Addr().Unmap().Is4() != dst.Unmap().Is4() {
			// A placeholder holder's IPv4 peer, or the like: one family per datagram.
			o.Src = pick(g, peers6)
			if dst.Unmap().Is4() {
				o.Src = pick(g, peers4)
			}
		}
	case dst.Unmap().Is4():
		o.Src = pick(g, peers4)
	default:
		o.Src = pick(g, peers6)
	}
	if s.Device != 0 && g.chance(0.7) {
		o.Ifindex = s.Device
	}
	return o
}
