package main

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

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
	return r.lookupsThen(sh, sets, targets, o, skip, nil)
}

// lookupsThen is lookups that also calls after, if not nil, with each
// target's fixture once its lookups are timed, before it is closed.
func (r *runner) lookupsThen(sh *suite.Shape, sets []string, targets []suite.Target, o suite.Options,
	skip func(suite.Target) bool, after func(suite.Target, suite.Fixture)) *result {
	res := &result{shape: sh, m: map[string]map[string]meas{}, cost: map[string]suite.Cost{}}
	for _, s := range sets {
		res.m[s] = map[string]meas{}
	}
	for _, t := range targets {
		if skip != nil && skip(t) {
			continue
		}
		r.detail(" %s: building %s (%s sockets)", sh.Name, t.Name, fmtInt(len(sh.Socks)))
		f, cost, err := suite.Prepare(t, sh, o)
		if r.gaveUp("", err) {
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
		if after != nil {
			after(t, f)
		}
		f.Close()
		f = nil
		runtime.GC()
	}
	return res
}

// buildBudget is the longest a scenario may spend building one table.
func (r *runner) buildBudget() time.Duration { return tableBudget.at(r.c.quick) }

// gaveUp reports whether err, if not nil, ends a measurement: a table
// that could not be built within its budget leaves the measurement not
// measured, any other error fails the run. what, if not empty, names the
// measurement in the message.
func (r *runner) gaveUp(what string, err error) bool {
	if err == nil {
		return false
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	if errors.Is(err, suite.ErrBudget) {
		r.notMeasured("%v", err)
	} else {
		r.fail("%v", err)
	}
	return true
}

// notMeasured reports, in the current section, on stderr and under the
// goals, a measurement that was given up.
func (r *runner) notMeasured(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.progress("NOT MEASURED: %s", s)
	r.printf("**Not measured:** %s.\n\n", s)
	r.notes = append(r.notes, "Not measured: "+s)
}

// lookupHeader is the header of a lookup table whose first column is
// named first, with a column per contender of ts (the map floor last) and
// one comparing main with gVisor.
func lookupHeader(first string, ts []suite.Target, main suite.Target) []string {
	h := []string{first}
	for _, t := range ts {
		h = append(h, t.Name)
	}
	return append(h, main.Name+" vs gVisor")
}

// lookupColumns explains the columns of a lookup table.
func lookupColumns(ts []suite.Target, main suite.Target) string {
	return fmt.Sprintf("Columns: each contender's time per lookup (lower is better), with in parentheses how many times "+
		"the map floor's time it takes; *map floor*: one probe of a Go map with the receiving socket's exact key; "+
		"*%s vs gVisor*: how many times faster (or slower) %s is than gVisor. — means not measured.", main.Name, main.Name)
}

// lookupRow formats one row: each contender's time per lookup with its
// ratio to the floor, and how main compares with gVisor.
func lookupRow(label string, ts []suite.Target, main suite.Target, get func(target string) meas) []string {
	floor := get(suite.Floor.Name)
	row := []string{label}
	for _, t := range ts {
		m := get(t.Name)
		switch {
		case !m.ok:
			row = append(row, "—")
		case t == suite.Floor:
			row = append(row, fmtNs(m.ns))
		case floor.ok:
			row = append(row, fmtNs(m.ns)+" ("+fmtX(m.ns/floor.ns)+")")
		default:
			row = append(row, fmtNs(m.ns))
		}
	}
	h, g := get(main.Name), get(suite.GVisor.Name)
	if h.ok && g.ok {
		row = append(row, fmtFaster(g.ns/h.ns))
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
		r.printf("No contender allocated on the lookup path (0 allocs/op everywhere, the fewest of the runs: the count " +
			"is the whole process's).\n\n")
		return
	}
	r.printf("Allocations on the lookup path: %v.\n\n", bad)
}
