package suite

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpdemux/udpdemux/bench/peer/gomap"
	"github.com/udpdemux/udpdemux/bench/peer/gvisor"
)

// Writer says what a concurrent writer does during a parallel lookup run.
type Writer int

// The writer modes.
const (
	// NoWriter runs lookups only.
	NoWriter Writer = iota
	// PacedWriter binds and closes one of the shape's churn sockets
	// PacedRate times a second.
	PacedWriter
	// FlatOutWriter binds and closes churn sockets as fast as it can, on
	// a goroutine of its own.
	FlatOutWriter
)

// PacedRate is the PacedWriter's rate of bind+close pairs per second.
const PacedRate = 10000

// String names the mode.
func (w Writer) String() string {
	switch w {
	case NoWriter:
		return "none"
	case PacedWriter:
		return fmt.Sprintf("%d bind+close/s", PacedRate)
	case FlatOutWriter:
		return "bind+close flat out"
	}
	return "writer(?)"
}

// ParallelResult is the outcome of a parallel lookup run.
type ParallelResult struct {
	Goroutines int
	Writer     Writer
	Elapsed    time.Duration
	Lookups    uint64 // lookups done by all goroutines
	Wrong      uint64 // lookups that found the wrong socket (must be 0)
	WriterOps  uint64 // bind+close pairs done by the writer
}

// PerSec returns the lookups per second, all goroutines together.
func (r ParallelResult) PerSec() float64 {
	return float64(r.Lookups) / r.Elapsed.Seconds()
}

// chunk is how many lookups a goroutine does between looks at the clock.
const chunk = 256

// runParallel runs g copies of look (each starting at a different offset
// in a list of n datagrams) and, unless w is NoWriter, write (one bind and
// close pair per call), for about d. If cpus is not nil, it has g entries
// and copy k runs on a thread of its own pinned to CPU cpus[k]; the writer
// is never pinned.
func runParallel(n, g int, cpus []int, d time.Duration, w Writer, look func(from, count int) (wrong uint64), write func() error) (ParallelResult, error) {
	res := ParallelResult{Goroutines: g, Writer: w}
	if cpus != nil && len(cpus) != g {
		return res, fmt.Errorf("%d goroutines on %d CPUs", g, len(cpus))
	}
	// Collect first, as go test does before each benchmark: the check
	// after the previous run (Fixture.Verify) leaves garbage, and a
	// collection of it during this run takes half a CPU from the lookups
	// for its mark phase, which only a run on both CPUs feels. Without
	// this, 4 096 sockets on one port read 1.52× on 2 goroutines where
	// the map floor, whose check allocates nothing, read 1.94×; with it,
	// 2.00× and 1.98× (eight interleaved pairs each).
	runtime.GC()
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		lookups atomic.Uint64
		wrong   atomic.Uint64
		wops    atomic.Uint64
		werr    error
		perrs   = make([]error, g)
		start   = make(chan struct{})
	)
	for k := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := k * n / g
			var c, bad uint64
			if cpus != nil {
				// Never unlocked: the pinned thread ends with the
				// goroutine, and no other goroutine runs on it.
				runtime.LockOSThread()
				if perrs[k] = pin(cpus[k]); perrs[k] != nil {
					<-start
					return
				}
			}
			<-start
			for !stop.Load() {
				cnt := min(chunk, n-j)
				bad += look(j, cnt)
				c += uint64(cnt)
				if j += cnt; j == n {
					j = 0
				}
			}
			lookups.Add(c)
			wrong.Add(bad)
		}()
	}
	if w != NoWriter {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			var ops uint64
			for !stop.Load() {
				if w == PacedWriter {
					due := uint64(time.Since(t0).Seconds() * PacedRate)
					if ops >= due {
						time.Sleep(time.Millisecond)
						continue
					}
				}
				if err := write(); err != nil {
					werr = err
					break
				}
				ops++
			}
			wops.Store(ops)
		}()
	}
	res.Elapsed = runFor(d, start, &stop, &wg)
	res.Lookups, res.Wrong, res.WriterOps = lookups.Load(), wrong.Load(), wops.Load()
	if err := errors.Join(perrs...); err != nil {
		return res, err
	}
	return res, werr
}

// Parallel looks up the datagrams of set i of f on g goroutines for about
// d, with writer w running alongside, and then checks f's invariants.
func Parallel(f Fixture, i, g int, d time.Duration, w Writer) (ParallelResult, error) {
	return parallel(f, i, g, nil, d, w)
}

// ParallelOn is Parallel with one goroutine on each of cpus, each on a
// thread pinned to its CPU (see CPUs); the writer is not pinned. The CPUs
// of a virtual machine need not be alike: on a 2-CPU VM one ran these
// lookups at half the rate of the other for tens of seconds at a time,
// and a lone unpinned goroutine then ran on whichever CPU the kernel
// picked, so that one goroutine measured alone on each CPU is the fair
// base for a speed-up.
// It needs Linux.
func ParallelOn(f Fixture, i int, cpus []int, d time.Duration, w Writer) (ParallelResult, error) {
	if len(cpus) == 0 {
		return ParallelResult{}, fmt.Errorf("no CPU to run on")
	}
	return parallel(f, i, len(cpus), cpus, d, w)
}

func parallel(f Fixture, i, g int, cpus []int, d time.Duration, w Writer) (ParallelResult, error) {
	n, look := f.Looker(i)
	write := f.Writer()
	if w != NoWriter && write == nil {
		return ParallelResult{}, fmt.Errorf("no concurrent writer for this contender")
	}
	r, err := runParallel(n, g, cpus, d, w, look, write)
	if err == nil {
		err = f.Verify()
	}
	return r, err
}

// RunParallel is the go test form of a parallel run: it looks up the
// datagrams of set i with b.RunParallel (so -cpu sets the goroutines), and
// fails if a lookup finds the wrong socket.
func RunParallel(b *testing.B, f Fixture, i int) {
	n, look := f.Looker(i)
	var start atomic.Int64
	var wrong atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		j := int(start.Add(1)*7919) % n
		var bad uint64
		for pb.Next() {
			bad += look(j, 1)
			if j++; j == n {
				j = 0
			}
		}
		wrong.Add(bad)
	})
	if w := wrong.Load(); w > 0 {
		b.Fatalf("%d lookups found the wrong socket", w)
	}
}

// Looker implements Fixture.
func (f *demuxFixture) Looker(i int) (int, func(from, count int) uint64) {
	ds := f.sets[i].D
	return len(ds), func(from, count int) (wrong uint64) {
		// By index, not by value: a copy of each 72-byte Datagram was
		// read back through narrower loads than it was written with, a
		// store-forwarding stall on every lookup.
		for k := from; k < from+count; k++ {
			dg := &ds[k]
			if s, v := f.t.Lookup(dg.Src, dg.Dst, 1); s == nil || !dg.accepts(v) {
				wrong++
			}
		}
		return wrong
	}
}

// Writer implements Fixture.
func (f *demuxFixture) Writer() func() error {
	churn, next := f.churn, 0
	if len(churn) == 0 {
		return nil
	}
	return func() error {
		c := &churn[next]
		if next++; next == len(churn) {
			next = 0
		}
		s, err := bindDemux(f.t, c, -1)
		if err != nil {
			return err
		}
		return f.t.Close(s)
	}
}

// Looker implements Fixture.
func (f *gvisorFixture) Looker(i int) (int, func(from, count int) uint64) {
	ids, want := f.ids[i], f.want[i]
	return len(ids), func(from, count int) (wrong uint64) {
		for j := from; j < from+count; j++ {
			ep := f.d.Find(ids[j], 1)
			if d := (Datagram{Want: want[j]}); ep == nil || !d.accepts(int32(ep.(*gvisor.Endpoint).Index)) {
				wrong++
			}
		}
		return wrong
	}
}

// Writer implements Fixture.
func (f *gvisorFixture) Writer() func() error {
	churn, next := f.churn, 0
	if len(churn) == 0 {
		return nil
	}
	ep := &gvisor.Endpoint{Index: -1}
	return func() error {
		c := &churn[next]
		if next++; next == len(churn) {
			next = 0
		}
		flags := gvisor.Flags{MostRecent: c.ReuseAddr, LoadBalanced: c.ReusePort}
		if err := f.d.Register(c.Local, c.Remote, flags, ep); err != nil {
			return err
		}
		f.d.Unregister(c.Local, c.Remote, flags, ep)
		return nil
	}
}

// Looker implements Fixture.
func (f *mapFixture[K]) Looker(i int) (int, func(from, count int) uint64) {
	keys, want := f.keys[i], f.want[i]
	return len(keys), func(from, count int) (wrong uint64) {
		for j := from; j < from+count; j++ {
			if f.m.Get(keys[j]) != want[j] {
				wrong++
			}
		}
		return wrong
	}
}

// Writer returns nil: a Go map cannot be written while it is read.
func (f *mapFixture[K]) Writer() func() error { return nil }

var (
	_ Fixture = (*demuxFixture)(nil)
	_ Fixture = (*gvisorFixture)(nil)
	_ Fixture = (*mapFixture[gomap.Tuple])(nil)
)

// runFor releases the goroutines waiting on start, lets them run for d,
// tells them to stop, waits for them, and returns how long they ran.
func runFor(d time.Duration, start chan struct{}, stop *atomic.Bool, wg *sync.WaitGroup) time.Duration {
	t0 := time.Now()
	close(start)
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return time.Since(t0)
}
