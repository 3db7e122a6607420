package demux

import (
	mrand "math/rand/v2"
	"net/netip"
	"reflect"
	"sync/atomic"
	"syscall"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/internal/fixed"
	"github.com/udpdemux/udpdemux/internal/grow"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// Table is a UDP socket table. All its methods are safe for concurrent use.
type Table[V any] struct {
	// Read by lookups, written only by New.
	//
	// The storage, for lookups: g, the growing one (Config.Slots 0), or
	// f, the fixed-size tables of Linux's design; the other is nil. Both
	// have the same read methods, called on the concrete type: through an
	// interface, the Query a lookup passes would escape to the heap.
	g     *grow.Engine
	f     *fixed.Engine
	seed  uint64   // the SO_REUSEPORT flow hash's, either storage's
	count bool     // Config.CountPaths
	vrep  valueRep // where the sockets' Refs hold their values

	// Read by writers, written only by New.
	w       writer[V] // the write side of either storage
	zones   ipv6.ZoneIndex
	onAddr  func(netip.AddrPort, bool, bool) error // Config.OnAddr
	isLocal func(netip.Addr, int) bool
	home    home[V] // the home of the sockets bound without a zone

	// Written by every bind or close (and stats by lookups with
	// CountPaths): at least a cache line away from what lookups read, as
	// grow's index count is, so that a writer on another port does not
	// slow lookups down (BenchmarkLookupBesideWriter).
	_     [64]byte
	occ   bind.Occupancy
	seq   atomic.Uint64 // bind order, for ties
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
	if cfg.Slots != 0 && !lookup.ValidSlots(cfg.Slots) {
		return nil, newError("%d slots: want 0 or a power of two from %d to %d: %w", cfg.Slots, lookup.MinSlots, lookup.MaxSlots, syscall.EINVAL)
	}
	if isNil(cfg.Rand) {
		return nil, newError("Rand is a nil %T: %w", cfg.Rand, syscall.EINVAL)
	}
	rnd := bind.NewRand(cfg.Rand) // nil: the runtime's generator
	r, err := bind.NewRange(cfg.PortLow, cfg.PortHigh, cfg.ReservedPorts)
	if err != nil {
		return nil, &OpError{Op: "new", Err: err}
	}
	t := &Table[V]{
		vrep:    repOf[V](),
		count:   cfg.CountPaths,
		zones:   cfg.ZoneIndex,
		isLocal: cfg.IsLocal,
		onAddr:  cfg.OnAddr,
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
		t.seed = flowSeed(rnd, cfg.FlowSeed)
		seeds := [4]uint64{rnd.Uint64(), rnd.Uint64(), rnd.Uint64(), rnd.Uint64()}
		t.g = grow.New(seeds, limit, t.seed, &t.occ, rnd)
		t.w = &writes[V, *grow.Port, *grow.Engine]{t: t, e: t.g}
		return t, nil
	}
	// Neither table refuses Slots, which is valid (checked above).
	h1, _ := hash1.New(cfg.Slots)
	h2, _ := hash2.New(cfg.Slots, rnd.Uint64())
	t.seed = flowSeed(rnd, cfg.FlowSeed)
	c := fixed.Config{H1: h1, H2: h2, Occ: &t.occ, Rand: rnd, Threshold: threshold, Seed: t.seed}
	switch cfg.Strategy {
	case OnePhase:
		c.Rule, c.Strategy = bind.OnePhaseRule, fixed.OnePhase
	case TwoPhase:
		c.Rule, c.Strategy = bind.TwoPhaseRule, fixed.TwoPhase
	default:
		c.Rule, c.Strategy = bind.HybridRule(threshold), fixed.Hybrid
	}
	// EphemeralIndex leaves Choose nil, which is fixed's default.
	switch cfg.Ephemeral {
	case EphemeralBitmap:
		c.Choose = (*bind.Ephemeral).Bitmap
	case EphemeralLinear:
		c.Choose = (*bind.Ephemeral).Linear
	}
	t.f = fixed.New(c)
	t.w = &writes[V, *fixed.Held, *fixed.Engine]{t: t, e: t.f}
	return t, nil
}

// isNil reports whether src is an interface holding a nil pointer, map,
// func or channel: a typed nil, whose methods would panic. A nil src
// holds none (its Kind is Invalid).
func isNil(src mrand.Source) bool {
	switch v := reflect.ValueOf(src); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Len returns the number of bound sockets.
func (t *Table[V]) Len() int { return t.occ.Total() }

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
	return lookup.Pick(lookup.FlowHash(t.seed, &q), n)
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
