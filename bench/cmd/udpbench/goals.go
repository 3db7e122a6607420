package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// goal is one of the goals of the benchmark issue, judged on this run.
type goal struct {
	text     string
	measured string
	verdict  string
}

// judge returns "met", "NOT met", or "not measured" when v is NaN.
func judge(v float64, ok bool) string {
	switch {
	case math.IsNaN(v):
		return "not measured"
	case ok:
		return "met"
	}
	return "**NOT met**"
}

// goals writes the section that judges the goals on this run's figures.
func (r *runner) goals() {
	var gs []goal
	// Shapes 1 and 2: hybrid against the floor and against gVisor.
	var keys []string
	for _, n := range []int{256, 512, 4096, 65536} {
		keys = append(keys, fmt.Sprintf("s1/%d/bound", n), fmt.Sprintf("s1/%d/wildcard", n))
	}
	keys = append(keys, "s2/bound")
	worstFloor, worstGV := nan(), nan()
	var floorAt, gvAt string
	for _, k := range keys {
		h, f, g := r.val(k+"/"+suite.Hybrid.Name), r.val(k+"/"+suite.Floor.Name), r.val(k+"/"+suite.GVisor.Name)
		if x := h / f; !math.IsNaN(x) && (math.IsNaN(worstFloor) || x > worstFloor) {
			worstFloor, floorAt = x, k
		}
		if x := g / h; !math.IsNaN(x) && (math.IsNaN(worstGV) || x < worstGV) {
			worstGV, gvAt = x, k
		}
	}
	gs = append(gs, goal{"Hybrid within 3× of the Go-map floor in shapes 1 and 2 (every size and set)",
		fmt.Sprintf("worst %s (%s)", fmtX(worstFloor), shortKey(floorAt)), judge(worstFloor, worstFloor <= 3)})
	gs = append(gs, goal{"Hybrid ahead of gVisor by at least 5× in shapes 1 and 2 (every size and set)",
		fmt.Sprintf("worst %s faster (%s)", fmtX(worstGV), shortKey(gvAt)), judge(worstGV, worstGV >= 5)})
	one, two := r.val("s2/bound/"+suite.OnePhase.Name), r.val("s2/bound/"+suite.TwoPhase.Name)
	gs = append(gs, goal{"Two-phase slower than one-phase in shape 2",
		fmt.Sprintf("two-phase %s, one-phase %s", fmtNs(two), fmtNs(one)), judge(two-one, two > one)})
	one, two = r.val("s1/4096/bound/"+suite.OnePhase.Name), r.val("s1/4096/bound/"+suite.TwoPhase.Name)
	gs = append(gs, goal{"One-phase slower than two-phase by 100× or more at 4096 sockets in shape 1",
		fmt.Sprintf("%s slower", fmtX(one/two)), judge(one/two, one/two >= 100)})
	for _, shape := range []string{"same-port", "distinct-ports"} {
		s := r.val("s5/" + shape + "/" + suite.Hybrid.Name + "/spread")
		f := r.val("s5/" + shape + "/" + suite.Floor.Name + "/spread")
		span := "1 000 to 1 000 000 sockets"
		if shape == "distinct-ports" {
			span = "1 000 to 65 000 sockets (65 535 ports)"
		}
		if r.c.quick {
			span = "quick run: 1 000 to 10 000 sockets"
		}
		gs = append(gs, goal{fmt.Sprintf("Hybrid lookup flat (within 1.5×), %s, %s", shape, span),
			fmt.Sprintf("slowest ÷ fastest %s (the map floor: %s)", fmtX(s), fmtX(f)), judge(s, s <= 1.5)})
	}
	var sps []string
	worstSp := nan()
	for k, v := range r.vals {
		if strings.HasPrefix(k, "s6/") && strings.Contains(k, "/"+suite.Hybrid.Name+"/") && strings.HasSuffix(k, fmt.Sprintf("/%d/speedup", suite.NoWriter)) {
			sps = append(sps, fmt.Sprintf("%s %s", strings.Split(k, "/")[1], fmtX(v)))
			if math.IsNaN(worstSp) || v < worstSp {
				worstSp = v
			}
		}
	}
	gs = append(gs, goal{"Parallel lookup speed-up of at least 1.8× on 2 goroutines (hybrid, no writer)",
		strings.Join(slices.Sorted(slices.Values(sps)), "; "), judge(worstSp, worstSp >= 1.8)})
	idx := func(free int) float64 { return r.val(fmt.Sprintf("s7/%d/%s", free, suite.Index.Name)) }
	gs = append(gs, goal{"bind(0) with 1 free port in 10 000: ≤ 5 µs (occupancy index)",
		bind0Cell(idx(1), r.val("s7/1/"+suite.GVisorPorts.Name), r.val("s7/1/"+suite.Kernel.Name)), judge(idx(1), idx(1) <= 5000)})
	gs = append(gs, goal{"bind(0) in a full range fails in ≤ 1 µs (occupancy index)",
		bind0Cell(idx(0), r.val("s7/0/"+suite.GVisorPorts.Name), r.val("s7/0/"+suite.Kernel.Name)), judge(idx(0), idx(0) <= 1000)})
	gs = append(gs, goal{"bind(0) with 5000 free ports: ≤ 1 µs (occupancy index)",
		bind0Cell(idx(5000), r.val("s7/5000/"+suite.GVisorPorts.Name), r.val("s7/5000/"+suite.Kernel.Name)), judge(idx(5000), idx(5000) <= 1000)})

	sec := &section{title: "Goals of the benchmark issue, judged on this run"}
	r.sections = append([]*section{sec}, r.sections...)
	r.cur = sec
	fmt.Printf("\n## %s\n\n", sec.title)
	if r.c.quick {
		r.printf("This is a quick run: sizes are reduced and measurements short, so these verdicts are indicative only.\n\n")
	}
	t := newTable("goal", "measured", "verdict")
	for _, g := range gs {
		t.add(g.text, g.measured, g.verdict)
	}
	r.printf("%s\n", t)
	for _, n := range r.notes {
		r.printf("- %s\n", n)
	}
}

func bind0Cell(idx, gv, linux float64) string {
	s := fmtNs(idx)
	if !math.IsNaN(gv) {
		s += "; gVisor " + fmtNs(gv)
	}
	if !math.IsNaN(linux) {
		s += "; Linux " + fmtNs(linux)
	}
	return s
}

// shortKey turns "s1/4096/bound" into a readable place.
func shortKey(k string) string {
	switch {
	case k == "":
		return "—"
	case strings.HasPrefix(k, "s1/"):
		f := strings.Split(k, "/")
		return "shape 1, " + f[1] + " sockets, " + f[2]
	case strings.HasPrefix(k, "s2/"):
		return "shape 2"
	}
	return k
}
