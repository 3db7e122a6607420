package main

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// goal is one of the project's performance goals, judged on this run.
type goal struct {
	text     string
	measured string
	verdict  string
}

// Verdicts.
const (
	met         = "met"
	notMet      = "**NOT met**"
	notMeasured = "**NOT MEASURED**"
)

// place is one figure a goal is judged on, where it was measured.
type place struct {
	label string
	v     float64 // NaN when not measured
}

// limit judges a goal that every place must meet: each v ≤ max when
// atMost, else each v ≥ max. It shows the worst place with show. A place
// that was not measured makes the goal not measured, and names it: a
// missing figure never passes.
func limit(text string, ps []place, atMost bool, max float64, show func(float64) string) goal {
	g := goal{text: text}
	var missing []string
	worst, at := math.NaN(), ""
	for _, p := range ps {
		switch {
		case math.IsNaN(p.v) && p.label == "":
			missing = append(missing, "the figure")
		case math.IsNaN(p.v):
			missing = append(missing, p.label)
		case math.IsNaN(worst), atMost && p.v > worst, !atMost && p.v < worst:
			worst, at = p.v, p.label
		}
	}
	var parts []string
	if !math.IsNaN(worst) {
		w := show(worst)
		if len(ps) > 1 {
			w = "worst " + w
		}
		if at != "" {
			w += " (" + at + ")"
		}
		parts = append(parts, w)
	}
	switch {
	case len(ps) == 0:
		parts = append(parts, "nothing to judge")
		g.verdict = notMeasured
	case len(missing) > 0:
		if len(missing) > 3 {
			missing = append(missing[:3], fmt.Sprintf("and %d more", len(missing)-3))
		}
		parts = append(parts, "NOT MEASURED: "+strings.Join(missing, "; "))
		g.verdict = notMeasured
	case atMost && worst <= max, !atMost && worst >= max:
		g.verdict = met
	default:
		g.verdict = notMet
	}
	g.measured = strings.Join(parts, "; ")
	return g
}

// goals writes the section that judges every scenario's goals on this
// run's figures, first in the report.
func (r *runner) goals() {
	var gs []goal
	for _, s := range scenarios {
		if s.goals != nil {
			gs = append(gs, s.goals(r)...)
		}
	}
	sec := &section{title: "Goals, judged on this run"}
	r.sections = append([]*section{sec}, r.sections...)
	r.cur = sec
	r.echo = true // the verdicts are printed even by a quiet run
	fmt.Printf("\n## %s\n\n", sec.title)
	if r.c.quick {
		r.printf("This is a quick run: sizes are reduced and measurements short, so these verdicts are indicative only.\n\n")
	}
	r.printf("A goal is *met* when every figure it names meets it; a figure that this run did not measure " +
		"(its scenario was not run, or a contender failed) makes it **NOT MEASURED**, never met.\n\n")
	t := newTable("goal", "measured", "verdict")
	var unmeasured, unmet int
	for _, g := range gs {
		t.add(g.text, g.measured, g.verdict)
		switch g.verdict {
		case notMeasured:
			unmeasured++
		case notMet:
			unmet++
		}
	}
	r.printf("%s\n", t)
	for _, n := range r.notes {
		r.printf("- %s\n", n)
	}
	fmt.Fprintf(os.Stderr, "udpbench: %d goals: %d met, %d not met, %d NOT MEASURED\n",
		len(gs), len(gs)-unmet-unmeasured, unmet, unmeasured)
}
