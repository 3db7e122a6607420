package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// gvisorVersion returns the version of gVisor built in.
func gvisorVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "gvisor.dev/gvisor" {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

// checkMax is how many datagrams of each set a fixture is checked on
// before it is timed.
const checkMax = 4096

// result holds, for one shape, the measurement of each set under each
// target, and what building each target cost.
type result struct {
	shape *suite.Shape
	m     map[string]map[string]meas // set name → target name → measurement
	cost  map[string]suite.Cost      // target name → build cost
}

func (res *result) get(set, target string) meas {
	if m, ok := res.m[set][target]; ok {
		return m
	}
	return none
}

// lookups loads sh into each target, checks it on the named sets and
// times them. skip says which targets not to run (they get no figure).
func (r *runner) lookups(sh *suite.Shape, sets []string, targets []suite.Target, o suite.Options, skip func(suite.Target) bool) *result {
	res := &result{shape: sh, m: map[string]map[string]meas{}, cost: map[string]suite.Cost{}}
	for _, s := range sets {
		res.m[s] = map[string]meas{}
	}
	for _, t := range targets {
		if skip != nil && skip(t) {
			continue
		}
		r.progress(" %s: building %s (%s sockets)", sh.Name, t.Name, fmtInt(len(sh.Socks)))
		f, cost, err := suite.Prepare(t, sh, o)
		if err != nil {
			r.fail("%v", err)
			continue
		}
		res.cost[t.Name] = cost
		for _, s := range sets {
			i := sh.SetIndex(s)
			if err := f.Check(i, checkMax); err != nil {
				r.fail("%s on %s, set %s: wrong answer: %v", t.Name, sh.Name, s, err)
				continue
			}
			res.m[s][t.Name] = r.bench(fmt.Sprintf("%s %s %s", sh.Name, s, t.Name), f.Bench(i))
		}
		f.Close()
		f = nil
		runtime.GC()
	}
	return res
}

// lookupHeader is the header of a lookup table whose first column is
// named first.
func lookupHeader(first string) []string {
	return []string{first, "one-phase", "two-phase", "hybrid", "gVisor", "map floor", "hybrid vs gVisor"}
}

// lookupRow formats one row: each contender's time per lookup with its
// ratio to the floor, and how much faster hybrid is than gVisor.
func lookupRow(label string, get func(target string) meas) []string {
	floor := get(suite.Floor.Name)
	row := []string{label}
	for _, t := range []suite.Target{suite.OnePhase, suite.TwoPhase, suite.Hybrid, suite.GVisor} {
		m := get(t.Name)
		if !m.ok {
			row = append(row, "—")
			continue
		}
		c := fmtNs(m.ns)
		if floor.ok {
			c += " (" + fmtX(m.ns/floor.ns) + ")"
		}
		row = append(row, c)
	}
	row = append(row, fmtNs(floor.ns))
	h, g := get(suite.Hybrid.Name), get(suite.GVisor.Name)
	if h.ok && g.ok {
		row = append(row, fmtX(g.ns/h.ns)+" faster")
	} else {
		row = append(row, "—")
	}
	return row
}

// allocNote adds a note naming every measurement that allocated.
func (r *runner) allocNote(rs ...*result) {
	var bad []string
	for _, res := range rs {
		for set, ms := range res.m {
			for t, m := range ms {
				if m.ok && m.allocs > 0 {
					bad = append(bad, fmt.Sprintf("%s %s %s: %.2f allocs/lookup", res.shape.Name, set, t, m.allocs))
				}
			}
		}
	}
	if len(bad) == 0 {
		r.printf("No contender allocated on the lookup path (0 allocs/op everywhere).\n\n")
		return
	}
	r.printf("Allocations on the lookup path: %v.\n\n", bad)
}
