package suite

import (
	"fmt"
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpdemux/udpdemux/demux"
)

// ResizeResult is the outcome of Resize.
type ResizeResult struct {
	From, To int
	Grow     time.Duration // how long binding from From to To sockets took
	// Lookups during the growth and, afterwards, at the final size.
	Lookups, LookupsAtSize uint64
	// Wrong counts lookups that missed a socket bound before they began,
	// or found another one; it must be 0.
	Wrong uint64
	// Worst is the slowest single lookup during the growth; Median and
	// MedianAtSize the median lookup during it and at the final size.
	// Each includes one reading of the clock.
	Worst, Median, MedianAtSize time.Duration
}

// resizeSock returns socket i of the resize shape: on 10.0.0.0/8 + i+1,
// port 4242, SO_REUSEADDR; every odd one connected to a peer of its own,
// so that both the (address, port) table and the 4-tuple table grow.
func resizeSock(i int) Sock {
	s := Sock{Local: netip.AddrPortFrom(addr4(10, i+1), SamePortPort), ReuseAddr: true}
	if i%2 == 1 {
		s.Remote = peer(i % (1 << 20))
	}
	return s
}

// resizeSrc is the source of a datagram to socket i of the resize shape.
func resizeSrc(i int) netip.AddrPort {
	if i%2 == 1 {
		return peer(i % (1 << 20))
	}
	return netip.AddrPortFrom(addr4(100, 64<<16|1), 1000)
}

// latencies is a histogram of lookup times at 1 ns resolution up to 8 µs,
// with the slowest kept exactly.
type latencies struct {
	n     [8192]uint64
	over  uint64
	worst time.Duration
}

func (l *latencies) add(d time.Duration) {
	if d < time.Duration(len(l.n)) {
		l.n[d]++
	} else {
		l.over++
	}
	l.worst = max(l.worst, d)
}

func (l *latencies) merge(o *latencies) {
	for i := range l.n {
		l.n[i] += o.n[i]
	}
	l.over += o.over
	l.worst = max(l.worst, o.worst)
}

func (l *latencies) count() uint64 {
	c := l.over
	for _, v := range l.n {
		c += v
	}
	return c
}

// median returns the median, or 8 µs or more when it is past the
// histogram (then the worst stands for it).
func (l *latencies) median() time.Duration {
	half, c := (l.count()+1)/2, uint64(0)
	for i, v := range l.n {
		if c += v; c >= half && v > 0 {
			return time.Duration(i)
		}
	}
	return l.worst
}

// Resize binds from sockets of the resize shape into a table made with
// demux.Config{}, then binds the rest up to to on one goroutine while g
// goroutines look up datagrams to sockets already bound (each lookup picks
// one at random among those published before it began, so it must find
// it), timing every lookup. Then the same goroutines look up at the final
// size with no writer, for as long as the growth took (at least 200 ms
// and at most 2 s), to give the median of a table already at size.
//
// A growth that takes longer than budget (if not 0) is given up with
// ErrBudget.
func Resize(from, to, g int, seed uint64, budget time.Duration) (ResizeResult, error) {
	res := ResizeResult{From: from, To: to}
	t, err := demux.New[int32](demux.Config{})
	if err != nil {
		return res, err
	}
	for i := range from {
		s := resizeSock(i)
		if _, err := bindDemux(t, &s, int32(i)); err != nil {
			return res, err
		}
	}
	var published atomic.Int64
	published.Store(int64(from))
	look := func(stop *atomic.Bool, k int, hist *latencies, wrong *atomic.Uint64) {
		x := seed*0x9e3779b97f4a7c15 + uint64(k+1)*0xbf58476d1ce4e5b9
		var bad uint64
		for !stop.Load() {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			n := published.Load()
			hi, _ := bits.Mul64(x, uint64(n))
			i := int(hi)
			dst := netip.AddrPortFrom(addr4(10, i+1), SamePortPort)
			src := resizeSrc(i)
			t0 := time.Now()
			s, v := t.Lookup(src, dst, 1)
			hist.add(time.Since(t0))
			if s == nil || v != int32(i) {
				bad++
			}
		}
		wrong.Add(bad)
	}
	run := func(write func() error, d time.Duration) (latencies, uint64, time.Duration, error) {
		var (
			stop  atomic.Bool
			wg    sync.WaitGroup
			wrong atomic.Uint64
			hists = make([]latencies, g)
			werr  error
		)
		start := time.Now()
		for k := range g {
			wg.Add(1)
			go func() { defer wg.Done(); look(&stop, k, &hists[k], &wrong) }()
		}
		if write != nil {
			werr = write()
		} else {
			time.Sleep(d)
		}
		elapsed := time.Since(start)
		stop.Store(true)
		wg.Wait()
		var all latencies
		for k := range hists {
			all.merge(&hists[k])
		}
		return all, wrong.Load(), elapsed, werr
	}
	t0 := time.Now()
	grow, wrong, elapsed, err := run(func() error {
		for i := from; i < to; i++ {
			s := resizeSock(i)
			if _, err := bindDemux(t, &s, int32(i)); err != nil {
				return err
			}
			published.Store(int64(i + 1))
			if i%1024 == 0 && budget > 0 && time.Since(t0) > budget {
				return fmt.Errorf("%w (%d of %d sockets bound)", ErrBudget, i+1, to)
			}
		}
		return nil
	}, 0)
	if err != nil {
		return res, fmt.Errorf("resize: %w", err)
	}
	res.Grow, res.Wrong, res.Lookups = elapsed, wrong, grow.count()
	res.Worst, res.Median = grow.worst, grow.median()
	at, wrong, _, _ := run(nil, min(max(elapsed, 200*time.Millisecond), 2*time.Second))
	res.Wrong += wrong
	res.LookupsAtSize, res.MedianAtSize = at.count(), at.median()
	if err := t.Verify(); err != nil {
		return res, err
	}
	return res, nil
}
