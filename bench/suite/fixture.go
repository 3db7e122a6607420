package suite

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/udpdemux/udpdemux/bench/peer/gomap"
	"github.com/udpdemux/udpdemux/bench/peer/gvisor"
	"github.com/udpdemux/udpdemux/demux"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Kind is a kind of contender.
type Kind int

// The kinds of contenders.
const (
	KindDemux  Kind = iota // udpdemux, under one of its strategies
	KindGVisor             // gVisor's transport demuxer
	KindMap                // the Go map floor
)

// Target is one contender of the lookup benchmarks.
type Target struct {
	Name     string
	Kind     Kind
	Strategy demux.Strategy // for KindDemux
	// Config, for KindDemux, replaces the shape's slot count and Strategy.
	Config *demux.Config
}

// The lookup contenders.
var (
	OnePhase = Target{"one-phase", KindDemux, demux.OnePhase, nil}
	TwoPhase = Target{"two-phase", KindDemux, demux.TwoPhase, nil}
	Hybrid   = Target{"hybrid", KindDemux, demux.Hybrid, nil}
	GVisor   = Target{"gVisor", KindGVisor, 0, nil}
	Floor    = Target{"map floor", KindMap, 0, nil}

	// Default is udpdemux as New(demux.Config{}) makes it: the engine a
	// user gets without sizing anything.
	Default = Target{"udpdemux", KindDemux, demux.Hybrid, &demux.Config{}}
	// Fixed4096 is the original design with 4 096 slots, Linux's table
	// size on a machine of a few GB.
	Fixed4096 = Target{"fixed 4 096 slots", KindDemux, demux.Hybrid, &demux.Config{Slots: 4096}}

	// Targets lists them all, in the order of the tables.
	Targets = []Target{OnePhase, TwoPhase, Hybrid, GVisor, Floor}
	// Strategies lists udpdemux's.
	Strategies = []Target{OnePhase, TwoPhase, Hybrid}
)

// Cost is what building a fixture cost.
type Cost struct {
	// Build is the time to bind (and connect) every socket.
	Build time.Duration
	// Heap is the growth of the live heap, in bytes, when measured (after
	// a garbage collection on both sides), else 0.
	Heap int64
}

// PerSocket returns the build time per socket in ns and the heap bytes
// per socket.
func (c Cost) PerSocket(n int) (ns, bytes float64) {
	if n == 0 {
		return 0, 0
	}
	return float64(c.Build.Nanoseconds()) / float64(n), float64(c.Heap) / float64(n)
}

// Options tune Prepare.
type Options struct {
	// Memory measures the heap growth (costs two garbage collections).
	Memory bool
	// Reserve makes the gVisor fixture reserve each socket's port with
	// its PortManager before registering it, as gVisor's UDP bind does,
	// so that its build cost is comparable with a bind. Only for shapes
	// without connected sockets.
	Reserve bool
	// Budget, if not 0, bounds the time to build udpdemux's table: past
	// it, Prepare gives up with ErrBudget. A design whose binds scan a
	// shared chain builds a large shape in quadratic time, and a run must
	// stay within its time.
	Budget time.Duration
}

// ErrBudget is Prepare's error when building a table took longer than
// Options.Budget.
var ErrBudget = errors.New("building the table took longer than its budget")

// Fixture is a shape loaded into one contender.
type Fixture interface {
	// Bench returns the benchmark that looks up the datagrams of set i
	// in turn, cyclically.
	Bench(i int) func(*testing.B)
	// Check looks up the first max datagrams of set i (all if max ≤ 0)
	// and fails if one finds the wrong socket.
	Check(i, max int) error
	// Looker returns the number of datagrams of set i and a function
	// that looks up count of them from index from, returning how many
	// found the wrong socket; it may run on several goroutines at once.
	Looker(i int) (n int, look func(from, count int) (wrong uint64))
	// Writer returns a function that binds and closes the next of the
	// shape's churn sockets, or nil if the contender cannot be written
	// while it is read.
	Writer() func() error
	// Verify checks the contender's invariants, where it has a way to.
	Verify() error
	// Close releases the fixture.
	Close()
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// Prepare loads sh into the contender t.
func Prepare(t Target, sh *Shape, o Options) (Fixture, Cost, error) {
	var before int64
	if o.Memory {
		before = heapInUse()
	}
	start := time.Now()
	var (
		f   Fixture
		err error
	)
	switch t.Kind {
	case KindDemux:
		cfg := demux.Config{Slots: sh.Slots, Strategy: t.Strategy}
		if t.Config != nil {
			cfg = *t.Config
		}
		var deadline time.Time
		if o.Budget > 0 {
			deadline = start.Add(o.Budget)
		}
		f, err = buildDemux(sh, cfg, deadline)
	case KindGVisor, KindMap:
		if sh.Devices() {
			err = errors.New("only udpdemux's fixtures bind devices")
			break
		}
		if t.Kind == KindGVisor {
			f, err = buildGVisor(sh, o.Reserve)
			break
		}
		switch {
		case sh.Grouped():
			f = buildGroupMap(sh)
		case sh.Connected():
			f = buildMap(sh, func(s *Sock) gomap.Tuple { return gomap.Tuple{Local: s.Key(), Remote: s.Remote} })
		default:
			f = buildMap(sh, (*Sock).Key)
		}
	default:
		err = fmt.Errorf("suite: unknown target %q", t.Name)
	}
	c := Cost{Build: time.Since(start)}
	if err != nil {
		return nil, c, fmt.Errorf("%s on %s: %w", t.Name, sh.Name, err)
	}
	if o.Memory {
		c.Heap = heapInUse() - before
		runtime.KeepAlive(f)
	}
	return f, c, nil
}

// Sink keeps benchmark results alive.
var Sink int64

// demuxFixture is a shape in a udpdemux table.
type demuxFixture struct {
	t     *demux.Table[int32]
	sets  []Set
	churn []Sock
}

// buildDemux binds and connects the sockets of sh in a new table, giving
// up with ErrBudget past deadline (if not zero).
func buildDemux(sh *Shape, cfg demux.Config, deadline time.Time) (*demuxFixture, error) {
	t, err := demux.New[int32](cfg)
	if err != nil {
		return nil, err
	}
	for i := range sh.Socks {
		if _, err := bindDemux(t, &sh.Socks[i], int32(i)); err != nil {
			return nil, err
		}
		if i%1024 == 1023 && !deadline.IsZero() && time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (%d of %d sockets bound)", ErrBudget, i+1, len(sh.Socks))
		}
	}
	return &demuxFixture{t: t, sets: sh.Sets, churn: sh.Churn}, nil
}

// bindDemux binds s in t with the value v, and connects it if it has a
// peer.
func bindDemux(t *demux.Table[int32], s *Sock, v int32) (*demux.Socket[int32], error) {
	so, err := t.Bind(demux.Options{Addr: s.Local.Addr(), Port: s.Local.Port(), ReuseAddr: s.ReuseAddr, ReusePort: s.ReusePort,
		Device: s.Device}, v)
	if err != nil {
		return nil, fmt.Errorf("bind %v: %w", s.Local, err)
	}
	if s.Connected() {
		if err := t.Connect(so, s.Remote, s.Src); err != nil {
			return nil, fmt.Errorf("connect %v to %v: %w", s.Local, s.Remote, err)
		}
	}
	return so, nil
}

// Table returns the fixture's table.
func (f *demuxFixture) Table() *demux.Table[int32] { return f.t }

// Bench implements the fixture interface.
func (f *demuxFixture) Bench(i int) func(*testing.B) {
	return LookupDemux(f.t, f.sets[i].D)
}

// LookupDemux is the benchmark of t.Lookup over the datagrams ds, in turn.
func LookupDemux(t *demux.Table[int32], ds []Datagram) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		var sum int64
		n, j := len(ds), 0
		for b.Loop() {
			d := &ds[j]
			_, v := t.Lookup(d.Src, d.Dst, 1)
			sum += int64(v)
			if j++; j == n {
				j = 0
			}
		}
		Sink += sum
	}
}

// Check implements the fixture interface.
func (f *demuxFixture) Check(i, max int) error {
	ds := f.sets[i].D
	if max > 0 && max < len(ds) {
		ds = ds[:max]
	}
	for _, d := range ds {
		s, v := f.t.Lookup(d.Src, d.Dst, 1)
		if s == nil || !d.accepts(v) {
			return fmt.Errorf("lookup %v→%v: got socket %v (value %d), want %d", d.Src, d.Dst, s != nil, v, d.Want)
		}
	}
	return nil
}

// Verify implements Fixture: the table's own invariant check.
func (f *demuxFixture) Verify() error { return f.t.Verify() }

// Close implements the fixture interface.
func (f *demuxFixture) Close() {}

// gvisorFixture is a shape in gVisor's transport demuxer.
type gvisorFixture struct {
	d     *gvisor.Demux
	p     *gvisor.Ports
	ids   [][]stack.TransportEndpointID
	want  [][]int32
	churn []Sock
}

// buildGVisor registers an endpoint for each socket of sh.
func buildGVisor(sh *Shape, reserve bool) (*gvisorFixture, error) {
	f := &gvisorFixture{d: gvisor.NewDemux(), churn: sh.Churn}
	if reserve {
		p, err := gvisor.NewPorts(32768, 60999)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.p = p
	}
	eps := make([]gvisor.Endpoint, len(sh.Socks))
	for i := range sh.Socks {
		s := &sh.Socks[i]
		eps[i].Index = i
		flags := gvisor.Flags{MostRecent: s.ReuseAddr, LoadBalanced: s.ReusePort}
		if f.p != nil {
			if s.Connected() {
				f.Close()
				return nil, fmt.Errorf("gvisor: Reserve with connected sockets is not supported")
			}
			if _, err := f.p.Reserve(s.Local.Addr(), s.Local.Port(), flags); err != nil {
				f.Close()
				return nil, err
			}
		}
		if err := f.d.Register(s.Key(), s.Remote, flags, &eps[i]); err != nil {
			f.Close()
			return nil, err
		}
	}
	for _, set := range sh.Sets {
		ids := make([]stack.TransportEndpointID, len(set.D))
		want := make([]int32, len(set.D))
		for j, d := range set.D {
			ids[j] = gvisor.ID(d.Dst, d.Src)
			want[j] = d.Want
		}
		f.ids = append(f.ids, ids)
		f.want = append(f.want, want)
	}
	return f, nil
}

// Bench implements the fixture interface.
func (f *gvisorFixture) Bench(i int) func(*testing.B) {
	return LookupGVisor(f.d, f.ids[i])
}

// LookupGVisor is the benchmark of gVisor's FindTransportEndpoint over
// the IDs ids (IPv4, NIC 1), in turn.
func LookupGVisor(d *gvisor.Demux, ids []stack.TransportEndpointID) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		var sum int64
		n, j := len(ids), 0
		for b.Loop() {
			ep := d.Find(ids[j], 1)
			sum += int64(ep.(*gvisor.Endpoint).Index)
			if j++; j == n {
				j = 0
			}
		}
		Sink += sum
	}
}

// Check implements the fixture interface.
func (f *gvisorFixture) Check(i, max int) error {
	ids := f.ids[i]
	if max > 0 && max < len(ids) {
		ids = ids[:max]
	}
	for j, id := range ids {
		ep := f.d.Find(id, tcpip.NICID(1))
		if ep == nil {
			return fmt.Errorf("gvisor: find %+v: none, want %d", id, f.want[i][j])
		}
		d := Datagram{Want: f.want[i][j]}
		if got := ep.(*gvisor.Endpoint).Index; !d.accepts(int32(got)) {
			return fmt.Errorf("gvisor: find %+v: got %d, want %d", id, got, f.want[i][j])
		}
	}
	return nil
}

// Verify implements Fixture; gVisor offers no invariant check.
func (f *gvisorFixture) Verify() error { return nil }

// Close implements the fixture interface.
func (f *gvisorFixture) Close() {
	f.d.Close()
	if f.p != nil {
		f.p.Close()
	}
}

// mapFixture is a shape in the Go map floor.
type mapFixture[K gomap.Key] struct {
	m    *gomap.Map[K]
	key  func(*Sock) K
	keys [][]K
	want [][]int32
}

// buildMap inserts every socket of sh under key(sock) and precomputes the
// key of the receiving socket of each datagram.
func buildMap[K gomap.Key](sh *Shape, key func(*Sock) K) *mapFixture[K] {
	f := &mapFixture[K]{m: gomap.New[K](len(sh.Socks)), key: key}
	for i := range sh.Socks {
		f.m.Insert(key(&sh.Socks[i]), int32(i))
	}
	for _, set := range sh.Sets {
		keys := make([]K, len(set.D))
		want := make([]int32, len(set.D))
		for j, d := range set.D {
			keys[j] = key(&sh.Socks[d.Want])
			want[j] = d.Want
		}
		f.keys = append(f.keys, keys)
		f.want = append(f.want, want)
	}
	return f
}

// Bench implements the fixture interface.
func (f *mapFixture[K]) Bench(i int) func(*testing.B) {
	return LookupMap(f.m, f.keys[i])
}

// LookupMap is the benchmark of one exact probe of m per key, in turn.
func LookupMap[K gomap.Key](m *gomap.Map[K], keys []K) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		var sum int64
		n, j := len(keys), 0
		for b.Loop() {
			sum += int64(m.Get(keys[j]))
			if j++; j == n {
				j = 0
			}
		}
		Sink += sum
	}
}

// Check implements the fixture interface.
func (f *mapFixture[K]) Check(i, max int) error {
	keys := f.keys[i]
	if max > 0 && max < len(keys) {
		keys = keys[:max]
	}
	for j, k := range keys {
		if got := f.m.Get(k); got != f.want[i][j] {
			return fmt.Errorf("map: get %v: got %d, want %d", k, got, f.want[i][j])
		}
	}
	return nil
}

// Verify implements Fixture; a map has nothing to check.
func (f *mapFixture[K]) Verify() error { return nil }

// Close implements the fixture interface.
func (f *mapFixture[K]) Close() {}
