package main

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// meas is one benchmark's result: the median of the runs.
type meas struct {
	ns     float64 // per operation
	allocs float64 // per operation
	ok     bool
}

// none is a missing measurement.
var none = meas{ns: math.NaN(), allocs: math.NaN()}

// bench measures f c.runs times and keeps the median run's time and the
// fewest allocations of any run (see summary).
func (r *runner) bench(label string, f func(*testing.B)) meas {
	var rs []run
	for range r.c.runs {
		one, ok := r.once(label, f)
		if !ok {
			return none
		}
		rs = append(rs, one)
	}
	return r.summary(label, rs)
}

// run is one measurement of a benchmark.
type run struct{ ns, allocs float64 }

// once measures f once; false (with the run failed) if the benchmark
// failed.
func (r *runner) once(label string, f func(*testing.B)) (run, bool) {
	res := testing.Benchmark(f)
	if res.N == 0 {
		r.fail("%s: the benchmark failed", label)
		return run{}, false
	}
	return run{float64(res.T.Nanoseconds()) / float64(res.N), float64(res.MemAllocs) / float64(res.N)}, true
}

// summary is the result of the runs rs of one benchmark: the median run's
// time and the fewest allocations of any run. The allocation count is
// the whole process's (runtime.MemStats), so a goroutine of another
// fixture that allocates during one run would be charged to it; an
// allocation of the benchmark's own shows in every run. It sorts rs.
func (r *runner) summary(label string, rs []run) meas {
	if len(rs) == 0 {
		return none
	}
	slices.SortFunc(rs, func(a, b run) int {
		switch {
		case a.ns < b.ns:
			return -1
		case a.ns > b.ns:
			return 1
		}
		return 0
	})
	m := rs[len(rs)/2]
	for _, x := range rs {
		m.allocs = min(m.allocs, x.allocs)
	}
	r.detail("  %-52s %12s/op %6.1f allocs/op", label, fmtNs(m.ns), m.allocs)
	return meas{ns: m.ns, allocs: m.allocs, ok: true}
}

// median returns the median of xs (NaN for none); it sorts xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// rounds says how a write figure was taken from n rounds.
func rounds(n int) string {
	if n == 1 {
		return "one round"
	}
	return fmt.Sprintf("the median of %d rounds", n)
}
