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
// fewest allocations of any run. The allocation count is the whole
// process's (runtime.MemStats), so a goroutine of another fixture that
// allocates during one run would be charged to f; an allocation of f's
// own shows in every run.
func (r *runner) bench(label string, f func(*testing.B)) meas {
	type one struct{ ns, allocs float64 }
	var rs []one
	for range r.c.runs {
		res := testing.Benchmark(f)
		if res.N == 0 {
			r.fail("%s: the benchmark failed", label)
			return none
		}
		rs = append(rs, one{float64(res.T.Nanoseconds()) / float64(res.N), float64(res.MemAllocs) / float64(res.N)})
	}
	slices.SortFunc(rs, func(a, b one) int {
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
