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

// TestGoalsReadTheirScenariosFigures runs no scenario and checks that
// every registered goal then reads NOT MEASURED: none passes on figures
// that nobody wrote.
func TestGoalsReadTheirScenariosFigures(t *testing.T) {
	r := &runner{vals: map[key]float64{}}
	n := 0
	for _, s := range registered() {
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
