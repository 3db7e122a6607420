package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLimit checks that a goal is met only when every figure it names was
// measured and meets it, and that a missing figure reads NOT MEASURED.
func TestLimit(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name    string
		ps      []place
		atMost  bool
		verdict string
	}{
		{"all within", []place{{"a", 1}, {"b", 2}}, true, met},
		{"one over", []place{{"a", 1}, {"b", 4}}, true, notMet},
		{"one missing, the rest within", []place{{"a", 1}, {"b", nan}}, true, notMeasured},
		{"one missing, the rest over", []place{{"a", 9}, {"b", nan}}, true, notMeasured},
		{"all missing", []place{{"a", nan}}, true, notMeasured},
		{"nothing to judge", nil, true, notMeasured},
		{"at least, met", []place{{"a", 3}, {"b", 5}}, false, met},
		{"at least, one under", []place{{"a", 2}, {"b", 5}}, false, notMet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := limit("goal", tc.ps, tc.atMost, 3, fmtX)
			assert.Equal(t, tc.verdict, g.verdict)
			if tc.verdict == notMeasured && len(tc.ps) > 0 {
				assert.Contains(t, g.measured, "NOT MEASURED")
			}
		})
	}
}

// TestFaster checks that a slow-down reads as "slower", not as a fraction
// "faster".
func TestFaster(t *testing.T) {
	assert.Equal(t, "1.47× slower", fmtFaster(0.68))
	assert.Equal(t, "2.50× faster", fmtFaster(2.5))
	assert.Equal(t, "—", fmtFaster(math.NaN()))
}

// TestUnits checks each figure's unit on both sides of every step.
func TestUnits(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		f    func(float64) string
		v    float64
		want string
	}{
		{fmtNs, 9.5, "9.50 ns"}, {fmtNs, 10, "10.0 ns"}, {fmtNs, 999, "999.0 ns"}, {fmtNs, 1000, "1 µs"},
		{fmtNs, 12345, "12.3 µs"}, {fmtNs, 2.5e6, "2.5 ms"}, {fmtNs, nan, "—"},
		{fmtX, 9.99, "9.99×"}, {fmtX, 10, "10.0×"}, {fmtX, 99.9, "99.9×"}, {fmtX, 100, "100×"}, {fmtX, inf, "—"},
		{fmtRate, 999, "999 /s"}, {fmtRate, 1000, "1.0 k/s"}, {fmtRate, 999999, "1000.0 k/s"}, {fmtRate, 2.5e6, "2.50 M/s"},
		{fmtAllocs, 0, "0 allocs"}, {fmtAllocs, 1.0 / 3000, "0.000333 allocs"}, {fmtAllocs, 2, "2 allocs"}, {fmtAllocs, nan, "—"},
		{fmtBytes, 1023, "1023 B"}, {fmtBytes, 1024, "1.0 KiB"}, {fmtBytes, 3 << 20, "3.0 MiB"}, {fmtBytes, nan, "—"},
	} {
		assert.Equal(t, tc.want, tc.f(tc.v), "%v", tc.v)
	}
}

// TestScenarioIDsUnique checks that no two scenarios share a name, by
// which -scenarios picks them and their figures are keyed.
func TestScenarioIDsUnique(t *testing.T) {
	seen := map[scenarioID]bool{}
	for _, s := range scenarios {
		assert.False(t, seen[s.id], "scenario %s listed twice", s.id)
		seen[s.id] = true
	}
}

// TestGoalsReadTheirScenariosFigures runs no scenario and checks that
// every registered goal then reads NOT MEASURED: none passes on figures
// that nobody wrote.
func TestGoalsReadTheirScenariosFigures(t *testing.T) {
	r := &runner{vals: map[key]float64{}}
	n := 0
	for _, s := range scenarios {
		if s.goals == nil {
			continue
		}
		for _, g := range s.goals(r) {
			n++
			assert.Equal(t, notMeasured, g.verdict, "%s: %s", s.id, g.text)
		}
	}
	assert.NotZero(t, n)
}
