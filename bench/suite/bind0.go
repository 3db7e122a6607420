package suite

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/udpdemux/udpdemux/bench/peer/gvisor"
	"github.com/udpdemux/udpdemux/demux"
)

// The bind(0) benchmarks use a 10 000-port ephemeral range and, for
// udpdemux, the number of UDP hash slots that Linux 6.18 chose on this
// machine kind (dmesg: "UDP hash table entries: 16384").
const (
	Bind0Low   = 40000
	Bind0High  = 49999
	Bind0Range = Bind0High - Bind0Low + 1
	Bind0Slots = 16384
)

// Bind0Target is a contender of the bind(0) benchmarks.
type Bind0Target struct {
	Name      string
	Kind      Kind
	Ephemeral demux.Ephemeral // for KindDemux
}

// KindKernel is the real Linux kernel, through syscalls.
const KindKernel Kind = 100

// The bind(0) contenders.
var (
	Linear      = Bind0Target{"pre-2009 linear", KindDemux, demux.EphemeralLinear}
	Bitmap      = Bind0Target{"kernel bitmap", KindDemux, demux.EphemeralBitmap}
	Index       = Bind0Target{"occupancy index", KindDemux, demux.EphemeralIndex}
	GVisorPorts = Bind0Target{"gVisor", KindGVisor, 0}
	Kernel      = Bind0Target{"Linux", KindKernel, 0}

	// Bind0Targets lists the contenders that need no privileges.
	Bind0Targets = []Bind0Target{Linear, Bitmap, Index, GVisorPorts}
)

// FreePorts returns which ports of the bind(0) range are left free: free
// of them, scattered at random.
func FreePorts(free int, seed uint64) map[uint16]bool {
	r := rand.New(rand.NewPCG(seed, 7))
	m := make(map[uint16]bool, free)
	for _, i := range r.Perm(Bind0Range)[:free] {
		m[uint16(Bind0Low+i)] = true
	}
	return m
}

// Bind0Fixture is a bind(0) range with some ports free, in one contender.
type Bind0Fixture interface {
	// Bench returns the benchmark of bind(0) on 0.0.0.0 followed by a
	// close of the socket (when the bind succeeded).
	Bench() func(*testing.B)
	// Check binds port 0 a few times and fails if the port is not one of
	// the free ones, or, when none is free, if bind(0) does not fail
	// with EADDRINUSE.
	Check() error
	// Close releases the fixture.
	Close()
}

// PrepareBind0 fills every port of the range with a socket bound to
// 0.0.0.0, except free ports scattered at random.
func PrepareBind0(t Bind0Target, free int, seed uint64) (Bind0Fixture, error) {
	fp := FreePorts(free, seed)
	switch t.Kind {
	case KindDemux:
		return prepareBind0Demux(t.Ephemeral, fp)
	case KindGVisor:
		return prepareBind0GVisor(fp)
	case KindKernel:
		return prepareBind0Kernel(fp)
	}
	return nil, fmt.Errorf("suite: unknown bind(0) target %q", t.Name)
}

type bind0Demux struct {
	t    *demux.Table[int32]
	free map[uint16]bool
}

func newBind0Table(e demux.Ephemeral) (*demux.Table[int32], error) {
	return demux.New[int32](demux.Config{Slots: Bind0Slots, Ephemeral: e, PortLow: Bind0Low, PortHigh: Bind0High})
}

func prepareBind0Demux(e demux.Ephemeral, free map[uint16]bool) (*bind0Demux, error) {
	t, err := newBind0Table(e)
	if err != nil {
		return nil, err
	}
	for p := Bind0Low; p <= Bind0High; p++ {
		if free[uint16(p)] {
			continue
		}
		if _, err := t.Bind(demux.Options{Addr: any4, Port: uint16(p)}, 0); err != nil {
			return nil, fmt.Errorf("fill port %d: %w", p, err)
		}
	}
	return &bind0Demux{t: t, free: free}, nil
}

// Bench implements the fixture interface.
func (f *bind0Demux) Bench() func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		o := demux.Options{Addr: any4}
		var fails int
		for b.Loop() {
			s, err := f.t.Bind(o, 0)
			if err != nil {
				fails++
				continue
			}
			f.t.Close(s)
		}
		if fails > 0 && len(f.free) > 0 {
			b.Fatalf("%d of %d bind(0) failed with free ports", fails, b.N)
		}
	}
}

// checkBind0 binds port 0 100 times with bind and close, and checks the
// ports against free.
func checkBind0(free map[uint16]bool, bind func() (uint16, error), unbind func(uint16)) error {
	for range 100 {
		p, err := bind()
		if len(free) == 0 {
			if err == nil {
				return fmt.Errorf("bind(0) got port %d in a full range", p)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("bind(0) with %d free ports: %w", len(free), err)
		}
		unbind(p)
		if !free[p] {
			return fmt.Errorf("bind(0) chose port %d, which is not free", p)
		}
	}
	return nil
}

// Check implements the fixture interface.
func (f *bind0Demux) Check() error {
	var s *demux.Socket[int32]
	err := checkBind0(f.free, func() (uint16, error) {
		var err error
		s, err = f.t.Bind(demux.Options{Addr: any4}, 0)
		if err != nil {
			return 0, err
		}
		return s.LocalAddr().Port(), nil
	}, func(uint16) { f.t.Close(s) })
	if err == nil && len(f.free) == 0 {
		if _, err2 := f.t.Bind(demux.Options{Addr: any4}, 0); !errors.Is(err2, syscall.EADDRINUSE) {
			err = fmt.Errorf("bind(0) in a full range: %v, want EADDRINUSE", err2)
		}
	}
	if err == nil {
		err = f.t.Verify()
	}
	return err
}

// Close implements the fixture interface.
func (f *bind0Demux) Close() {}

type bind0GVisor struct {
	p    *gvisor.Ports
	free map[uint16]bool
}

func prepareBind0GVisor(free map[uint16]bool) (*bind0GVisor, error) {
	p, err := gvisor.NewPorts(Bind0Low, Bind0High)
	if err != nil {
		return nil, err
	}
	for port := Bind0Low; port <= Bind0High; port++ {
		if free[uint16(port)] {
			continue
		}
		if _, err := p.Reserve(any4, uint16(port), gvisor.Flags{}); err != nil {
			p.Close()
			return nil, fmt.Errorf("fill port %d: %w", port, err)
		}
	}
	return &bind0GVisor{p: p, free: free}, nil
}

// Bench implements the fixture interface.
func (f *bind0GVisor) Bench() func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		var fails int
		for b.Loop() {
			port, err := f.p.Reserve(any4, 0, gvisor.Flags{})
			if err != nil {
				fails++
				continue
			}
			f.p.Release(any4, port, gvisor.Flags{})
		}
		if fails > 0 && len(f.free) > 0 {
			b.Fatalf("%d of %d ReservePort(0) failed with free ports", fails, b.N)
		}
	}
}

// Check implements the fixture interface.
func (f *bind0GVisor) Check() error {
	return checkBind0(f.free, func() (uint16, error) {
		return f.p.Reserve(any4, 0, gvisor.Flags{})
	}, func(p uint16) { f.p.Release(any4, p, gvisor.Flags{}) })
}

// Close implements the fixture interface.
func (f *bind0GVisor) Close() { f.p.Close() }

// ReproResult is the outcome of the bind(0) livelock reproducer.
type ReproResult struct {
	Goroutines int
	Elapsed    time.Duration
	Binds      uint64 // successful bind(0) calls
	Fails      uint64 // bind(0) calls that found no free port
	Closes     uint64 // sockets closed on neighbouring ports
	Free       int    // free ports of the range at the end
}

// BindsPerSec returns the successful bind(0) calls per second.
func (r ReproResult) BindsPerSec() float64 {
	return float64(r.Binds) / r.Elapsed.Seconds()
}

// handle is a socket of the reproducer.
type handle struct {
	port    uint16
	s       *demux.Socket[int32] // udpdemux only
	dynamic bool                 // bound by bind(0) in the loop
}

// porter is what the reproducer needs of a contender.
type porter interface {
	bind(port uint16) (*handle, error) // 0: ephemeral
	close(h *handle)
	verify(live int) error
}

type demuxPorter struct{ t *demux.Table[int32] }

func (p demuxPorter) bind(port uint16) (*handle, error) {
	s, err := p.t.Bind(demux.Options{Addr: any4, Port: port}, 0)
	if err != nil {
		return nil, err
	}
	return &handle{port: s.LocalAddr().Port(), s: s}, nil
}

func (p demuxPorter) close(h *handle) { p.t.Close(h.s) }

func (p demuxPorter) verify(live int) error {
	if n := p.t.Len(); n != live {
		return fmt.Errorf("table holds %d sockets, the reproducer %d", n, live)
	}
	return p.t.Verify()
}

type gvisorPorter struct{ p *gvisor.Ports }

func (p gvisorPorter) bind(port uint16) (*handle, error) {
	got, err := p.p.Reserve(any4, port, gvisor.Flags{})
	if err != nil {
		return nil, err
	}
	return &handle{port: got}, nil
}

func (p gvisorPorter) close(h *handle) { p.p.Release(any4, h.port, gvisor.Flags{}) }

func (gvisorPorter) verify(int) error { return nil }

// Reproduce runs the reproducer of the January 2009 thread for about d:
// every port of the bind(0) range but free (scattered) holds a socket on
// 0.0.0.0, and g goroutines each loop: bind(0) a socket on 0.0.0.0; close
// the sockets on the two neighbouring ports, binding a socket again on a
// neighbouring port whose socket had been filled in before the run (or,
// when a bind(0) took that port in the meantime, binding port 0 for a
// replacement), so that the range stays almost full; close its own socket
// of the previous round, unless a neighbour closed it already. Binds
// counts the loop's first bind(0) only.
//
// It then checks that the contender holds exactly the sockets the
// reproducer thinks are open, and for udpdemux the table's invariants.
func Reproduce(t Bind0Target, g, free int, d time.Duration, seed uint64) (ReproResult, error) {
	res := ReproResult{Goroutines: g}
	var p porter
	switch t.Kind {
	case KindDemux:
		tab, err := newBind0Table(t.Ephemeral)
		if err != nil {
			return res, err
		}
		p = demuxPorter{tab}
	case KindGVisor:
		ports, err := gvisor.NewPorts(Bind0Low, Bind0High)
		if err != nil {
			return res, err
		}
		defer ports.Close()
		p = gvisorPorter{ports}
	default:
		return res, fmt.Errorf("suite: no reproducer for %q", t.Name)
	}
	fp := FreePorts(free, seed)
	slots := make([]atomic.Pointer[handle], Bind0Range)
	for port := Bind0Low; port <= Bind0High; port++ {
		if fp[uint16(port)] {
			continue
		}
		h, err := p.bind(uint16(port))
		if err != nil {
			return res, fmt.Errorf("fill port %d: %w", port, err)
		}
		slots[port-Bind0Low].Store(h)
	}
	var (
		stop                 atomic.Bool
		wg                   sync.WaitGroup
		binds, fails, closes atomic.Uint64
		start                = make(chan struct{})
	)
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev *handle
			var nb, nf, nc uint64
			<-start
			for !stop.Load() {
				h, err := p.bind(0)
				if err != nil {
					nf++
					continue
				}
				nb++
				h.dynamic = true
				slots[h.port-Bind0Low].Store(h)
				for _, q := range [2]int{int(h.port) - 1, int(h.port) + 1} {
					if q < Bind0Low || q > Bind0High {
						continue
					}
					old := slots[q-Bind0Low].Swap(nil)
					if old == nil {
						continue
					}
					p.close(old)
					nc++
					if old.dynamic {
						continue
					}
					// Keep the range as full as it was: bind the port
					// again or, if a bind(0) took it in the meantime,
					// bind(0) a replacement.
					nh, err := p.bind(uint16(q))
					if err != nil {
						nh, err = p.bind(0)
					}
					if err == nil {
						slots[nh.port-Bind0Low].Store(nh)
					}
				}
				if prev != nil && slots[prev.port-Bind0Low].CompareAndSwap(prev, nil) {
					p.close(prev)
				}
				prev = h
			}
			binds.Add(nb)
			fails.Add(nf)
			closes.Add(nc)
		}()
	}
	res.Elapsed = runFor(d, start, &stop, &wg)
	res.Binds, res.Fails, res.Closes = binds.Load(), fails.Load(), closes.Load()
	live := 0
	for i := range slots {
		if slots[i].Load() != nil {
			live++
		}
	}
	res.Free = Bind0Range - live
	return res, p.verify(live)
}
