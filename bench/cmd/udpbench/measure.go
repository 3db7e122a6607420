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
	return r.summary(label, rs, f)
}

// run is one measurement of a benchmark.
type run struct{ ns, allocs float64 }

// once measures f once; false (with the run failed) if the benchmark
// failed.
func (r *runner) once(label string, f func(*testing.B)) (run, bool) {
	if r.measured != nil {
		r.measured(label)
	}
	res := testing.Benchmark(f)
	if res.N == 0 {
		r.fail("%s: the benchmark failed", label)
		return run{}, false
	}
	return run{float64(res.T.Nanoseconds()) / float64(res.N), float64(res.MemAllocs) / float64(res.N)}, true
}

// allocRuns is how many runs a figure's allocation count may take.
const allocRuns = 3

// summary is the result of the runs rs of the benchmark f: the median
// run's time and the fewest allocations of any run. The allocation count
// is the whole process's (runtime.MemStats), and the runtime allocates
// now and then on its own (0 to 7 times in 500 ms of a test process that
// sat idle, with one of the suite's fixtures built or none), so one short
// run of a slow lookup can be charged a few allocations that are not its
// own; a goroutine of another fixture that allocates would be too. An
// allocation of the benchmark's own shows in every run. So where every
// run allocated and there were fewer than allocRuns of them (the quick
// mode takes one), f is run again, for its allocation count alone, until
// one run allocates nothing or allocRuns runs have been taken; the time
// stays the median of rs. It sorts rs.
func (r *runner) summary(label string, rs []run, f func(*testing.B)) meas {
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
	for n := len(rs); m.allocs > 0 && n < allocRuns; n++ {
		one, ok := r.once(label, f)
		if !ok {
			return none
		}
		m.allocs = min(m.allocs, one.allocs)
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
