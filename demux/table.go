package demux

import (
	mrand "math/rand/v2"
	"net/netip"
	"reflect"
	"sync/atomic"
	"syscall"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/fixed"
	"github.com/udpdemux/udpdemux/grow"
	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// Config configures a Table. The zero value is a good default.
type Config struct {
	// Slots selects the storage. 0, the default, makes tables that grow
	// and shrink with the sockets they hold, with a 4-tuple table for
	// connected sockets and bind checks that do not scan shared ports
	// (DESIGN.md, "Storage engines"). A power of two from 256 to 65536
	// makes Linux's design instead: a port table and an (address, port)
	// table of that many slots each, fixed for the table's life, kept to
	// compare the two designs; bind(0) algorithms other than
	// EphemeralIndex need it.
	Slots int
	// Threshold is the primary chain length above which Hybrid searches
	// the secondary table: 0 means 10 (Linux's value); it must not be
	// negative. The growing tables' lookups follow it; their bind checks
	// scan a port of up to 64 sockets and read the port's summary past
	// that (Stats counts them as primary and secondary), whatever the
	// threshold, since the summary costs memory a scan of a few does not.
	Threshold int
	// Strategy selects the lookup and bind-check strategy (default Hybrid).
	Strategy Strategy
	// Ephemeral selects the bind(0) algorithm (default EphemeralIndex).
	Ephemeral Ephemeral
	// PortLow and PortHigh bound the ephemeral range, inclusive (Linux
	// ip_local_port_range). Both 0 means 32768–60999; otherwise
	// 1 ≤ PortLow ≤ PortHigh.
	PortLow, PortHigh uint16
	// ReservedPorts are never chosen by bind(0) (Linux
	// ip_local_reserved_ports); explicit binds to them work.
	ReservedPorts []uint16
	// Rand is the random source for ephemeral ports and the hash seeds;
	// nil means math/rand/v2's top-level generator (ChaCha8, seeded by the
	// runtime from the system's entropy, drawn from without a lock). The
	// Table serializes its calls to a Rand it is given. A typed nil is EINVAL. A source that is
	// not random (a constant, in tests) never makes bind(0) hang, but
	// makes its choices and the hash seeds predictable.
	Rand mrand.Source
	// FlowSeed, if not 0, seeds the flow hash that spreads datagrams over
	// the members of an SO_REUSEPORT group, instead of a seed drawn from
	// Rand. Tables (in other processes or on other hosts) with the same
	// FlowSeed send a flow to the member at the same position of groups
	// with the same members in the same order. It seeds nothing else: the
	// secondary table's seed and the ephemeral ports stay random, so one
	// who learns FlowSeed can neither predict ports nor aim datagrams at
	// one secondary slot. Linux has no such setting (its flow hash is
	// seeded at boot); a shared seed is what a fleet of user-space stacks
	// behind one load balancer needs.
	FlowSeed uint64
	// ZoneIndex maps an IPv6 zone to an interface index; nil accepts
	// decimal indexes only ("fe80::1%2" is interface 2).
	ZoneIndex func(zone string) (int, error)
	// IsLocal, if set, says whether addr is an address of this host as
	// seen from device (the socket's interface index, 0 for none), and
	// Bind fails with EADDRNOTAVAIL, before looking at the port, for an
	// address it denies. It is not asked about the wildcards, multicast
	// addresses or 255.255.255.255, which Linux always lets bind; a
	// v4-mapped address comes as its IPv4 address, without zone. It
	// should accept what the host's local routing table types local or
	// broadcast: on Linux 6.18, with 10.0.0.1/24 on eth0, 10.0.0.1 and
	// 10.0.0.255 but not 10.0.0.0; every 127/8 address; a global IPv6
	// address whatever the device; a link-local or loopback one only on
	// its own interface (::1 is not local on eth0). Nil accepts every
	// address, as Linux does for a socket with IP_FREEBIND.
	IsLocal func(addr netip.Addr, device int) bool
	// CountPaths makes every lookup count the path it took, for
	// Stats().Lookups. It is off by default because the count is a write
	// to memory that all cores share: with it, lookups on two cores slow
	// each other down (DESIGN.md, "Costs", has the measurement).
	CountPaths bool
	// OnPort, if set, hears when a port comes into use and goes out of
	// use, so that a caller can keep something per port in step with the
	// table, such as the kernel socket that receives its datagrams.
	//
	// OnPort(port, true) is called when a bind is about to put the first
	// socket on a port: after the conflict check, before the socket is
	// published, so a lookup never finds a socket on a port whose event
	// has not been delivered. A non-nil error vetoes that bind, which
	// fails with an *OpError wrapping it and leaves the table unchanged;
	// bind(0) then fails too, it does not try another port.
	// OnPort(port, false) is called after the last socket of a port was
	// closed and can no longer be found; its error is ignored. Connect
	// changes no port and calls neither.
	//
	// A port's events come in order, alternating, under the port's lock
	// (with fixed Slots, a lock that also covers the ports sharing its
	// primary slot): OnPort must not bind, connect or close sockets of the
	// table nor iterate its Sockets, which would deadlock. Lookups, Ports
	// and Len are safe: a lookup takes a port's lock only while writers
	// keep moving that port's sockets, which none can while OnPort holds
	// it. A panic in OnPort reaches the
	// caller of Bind or Close with the table consistent (see "Callbacks
	// that panic" in the package documentation).
	OnPort func(port uint16, inUse bool) error
}

// DefaultThreshold is the hybrid rule's primary chain length (Linux: 10).
const DefaultThreshold = 10

// Table is a UDP socket table. All its methods are safe for concurrent use.
type Table[V any] struct {
	// Read by lookups, written only by New.
	//
	// g is the growing storage (Config.Slots 0) for lookups; nil for the
	// fixed-size tables of Linux's design, which tabs are.
	g        *grow.Engine
	tabs     lookup.Tables
	strategy Strategy
	count    bool     // Config.CountPaths
	vrep     valueRep // where the sockets' Refs hold their values

	// Read by writers, written only by New.
	w       writer[V] // the write side of either storage
	zones   ipv6.ZoneIndex
	isLocal func(netip.Addr, int) bool
	home    home[V] // the home of the sockets bound without a zone

	// Written by every bind or close (and stats by lookups with
	// CountPaths): at least a cache line away from what lookups read, as
	// bhash.Map's count is. Beside a writer on another port, that took
	// lookups from 48–50 to 36–38 ns (BenchmarkLookupBesideWriter).
	_     [64]byte
	occ   bind.Occupancy
	seq   atomic.Uint64 // bind order, for ties
	n     atomic.Int64  // sockets bound
	stats counters
}

// New makes a table. It fails with an error wrapping syscall.EINVAL if the
// config is invalid.
func New[V any](cfg Config) (*Table[V], error) {
	threshold := cfg.Threshold
	switch {
	case threshold < 0:
		return nil, newError("threshold %d is negative: %w", threshold, syscall.EINVAL)
	case threshold == 0:
		threshold = DefaultThreshold
	}
	if cfg.Strategy > TwoPhase {
		return nil, newError("unknown strategy %d: %w", cfg.Strategy, syscall.EINVAL)
	}
	if cfg.Ephemeral > EphemeralLinear {
		return nil, newError("unknown ephemeral algorithm %d: %w", cfg.Ephemeral, syscall.EINVAL)
	}
	if cfg.Slots != 0 && !sock.ValidSlots(cfg.Slots) {
		return nil, newError("%d slots: want 0 or a power of two from %d to %d: %w", cfg.Slots, sock.MinSlots, sock.MaxSlots, syscall.EINVAL)
	}
	rng := cfg.Rand
	if rng != nil && isNil(rng) {
		return nil, newError("Rand is a nil %T: %w", rng, syscall.EINVAL)
	}
	rnd := bind.NewRand(rng) // nil: the runtime's generator
	r, err := bind.NewRange(cfg.PortLow, cfg.PortHigh, cfg.ReservedPorts)
	if err != nil {
		return nil, &OpError{Op: "new", Err: err}
	}
	t := &Table[V]{
		vrep:     repOf[V](),
		strategy: cfg.Strategy,
		count:    cfg.CountPaths,
		zones:    cfg.ZoneIndex,
		isLocal:  cfg.IsLocal,
	}
	t.home.t = t
	t.occ.OnPort = cfg.OnPort // port events; Ports and Sockets are in ports.go
	t.occ.Range = r
	if cfg.Slots == 0 {
		limit := threshold
		switch cfg.Strategy {
		case OnePhase:
			limit = grow.AlwaysScan
		case TwoPhase:
			limit = grow.AlwaysIndex
		}
		t.tabs.Seed = flowSeed(rnd, cfg.FlowSeed)
		seeds := [4]uint64{rnd.Uint64(), rnd.Uint64(), rnd.Uint64(), rnd.Uint64()}
		t.g = grow.New(seeds, limit, t.tabs.Seed, &t.occ, rnd)
		t.w = &writes[V, *grow.Port, *grow.Engine]{t: t, e: t.g}
		return t, nil
	}
	h1, err := hash1.New(cfg.Slots)
	if err != nil {
		return nil, &OpError{Op: "new", Err: err}
	}
	h2, err := hash2.New(cfg.Slots, rnd.Uint64())
	if err != nil {
		return nil, &OpError{Op: "new", Err: err}
	}
	t.tabs = lookup.Tables{H1: h1, H2: h2, Threshold: threshold, Seed: flowSeed(rnd, cfg.FlowSeed)}
	c := fixed.Config{H1: h1, H2: h2, Occ: &t.occ, Rand: rnd}
	switch cfg.Strategy {
	case OnePhase:
		c.Rule = bind.OnePhaseRule
	case TwoPhase:
		c.Rule = bind.TwoPhaseRule
	default:
		c.Rule = bind.HybridRule(threshold)
	}
	switch cfg.Ephemeral {
	case EphemeralBitmap:
		c.Choose = (*bind.Ephemeral).Bitmap
	case EphemeralLinear:
		c.Choose = (*bind.Ephemeral).Linear
	default:
		c.Choose = (*bind.Ephemeral).Index
	}
	t.w = &writes[V, *fixed.Held, *fixed.Engine]{t: t, e: fixed.New(c)}
	return t, nil
}

// isNil reports whether src is an interface holding a nil pointer, map,
// func or channel: a typed nil, whose methods would panic.
func isNil(src mrand.Source) bool {
	switch v := reflect.ValueOf(src); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Len returns the number of bound sockets.
func (t *Table[V]) Len() int { return int(t.n.Load()) }

// ReusePortIndex returns which member, counted from 0 in the group's order
// (see Group), of an n-member SO_REUSEPORT group without a selector
// receives the datagrams of the flow src → dst, by the flow hash alone. It
// returns 0 when n < 1 or dst is not deliverable. It is for models that
// keep their own groups; a program asks a socket's group instead
// (Socket.Group, then Group.Pick), which needs neither n nor the order and
// counts the selector.
func (t *Table[V]) ReusePortIndex(src, dst netip.AddrPort, n int) int {
	var q lookup.Query
	ok := q.Init(src, dst, 0)
	if !ok || n < 1 {
		return 0
	}
	return lookup.Pick(lookup.FlowHash(t.tabs.Seed, &q), n)
}

// flowSeed returns the flow hash seed: fixed, if not 0, else drawn from
// rnd. It draws in both cases, so that the ephemeral ports a given Rand
// yields do not depend on Config.FlowSeed.
func flowSeed(rnd *bind.Rand, fixed uint64) uint64 {
	if s := rnd.Uint64(); fixed == 0 {
		return s
	}
	return fixed
}
