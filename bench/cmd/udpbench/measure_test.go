package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// allocSink keeps the test's allocations on the heap.
var allocSink *[4]int

// TestSummaryAllocs checks that a figure's allocation count is the fewest
// of its runs, that runs charged with allocations not their own are
// measured again for the count, and that a benchmark that allocates on
// every operation still reads as allocating.
//
// Each run is 2 ms long: the runtime's own allocations, which a run of
// none could be charged with, are rare enough in 2 ms that both of its
// runs again being charged is not to be expected, where 1 s runs could be.
func TestSummaryAllocs(t *testing.T) {
	shortBenchtime(t)
	none := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
		}
	}
	each := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			allocSink = new([4]int)
		}
	}
	for _, tc := range []struct {
		name   string
		rs     []run
		f      func(*testing.B)
		ns     float64
		allocs func(float64) bool
	}{
		{"fewest of three", []run{{3, 0.2}, {1, 0}, {2, 0.1}}, each, 2, func(a float64) bool { return a == 0 }},
		{"one stray run measured again", []run{{5, 0.01}}, none, 5, func(a float64) bool { return a == 0 }},
		{"an allocating lookup stays allocating", []run{{5, 1}}, each, 5, func(a float64) bool { return a >= 1 }},
		{"three runs that allocated are not run again", []run{{1, 1}, {2, 1}, {3, 1}}, none, 2, func(a float64) bool { return a == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &runner{c: config{runs: 1}}
			m := r.summary(tc.name, tc.rs, tc.f)
			assert.True(t, m.ok)
			assert.Equal(t, tc.ns, m.ns)
			assert.True(t, tc.allocs(m.allocs), "allocs %v", m.allocs)
		})
	}
}
