package main

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
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
// target's fixture, on a table of its own (see lookupsWith).
func (r *runner) lookupsThen(sh *suite.Shape, sets []string, targets []suite.Target, o suite.Options,
	skip func(suite.Target) bool, after func(suite.Target, suite.Fixture)) *result {
	return r.lookupsWith(sh, sets, targets, o, skip, nil, after)
}

// lookupsWith loads sh into each target, checks it on the named sets and
// times them; more, if not nil, gives further benchmarks of a target's
// checked fixture by name, timed in the same rounds, whose figures land
// in the result as a set of that name does.
//
// It builds every target's fixture first and then times them in rounds:
// each round measures every set (and each of more's benchmarks) under
// every target once, the targets one after another. A figure is the
// median of its rounds. So the contenders that a ratio compares are
// measured in alternation, and a change in the machine's speed during the
// run (this machine has phases that differ by 2× and more) reaches them
// alike instead of deciding which of them it slows.
//
// What is measured while a table is built or written to (o.Memory's
// build cost and heap, and whatever after measures) depends on the live
// heap that the garbage collector must mark, so it is measured with each
// target alone: a first pass builds each target,
// hands it to after and closes it before the next is built. The rounds
// then use tables built again, unmeasured.
func (r *runner) lookupsWith(sh *suite.Shape, sets []string, targets []suite.Target, o suite.Options,
	skip func(suite.Target) bool, more func(suite.Target, suite.Fixture) map[string]func(*testing.B),
	after func(suite.Target, suite.Fixture)) *result {
	var skipAt func(*suite.Shape, suite.Target) bool
	if skip != nil {
		skipAt = func(_ *suite.Shape, t suite.Target) bool { return skip(t) }
	}
	return r.lookupsAcross([]*suite.Shape{sh}, sets, targets, o, skipAt, more, after)[0]
}

// lookupsAcross is lookupsWith for shapes whose figures a ratio compares
// with each other, such as the sizes of one family that a spread
// ("slowest ÷ fastest") is taken over, or a table under attack and the
// same table without the attack: the first pass runs shape by
// shape, and then every shape's tables are built and timed in the same
// rounds, shape after shape, so that the ratio's terms are measured in
// alternation too. It returns one result a shape, in the order of shs;
// skip, if not nil, says which targets not to run on a shape.
func (r *runner) lookupsAcross(shs []*suite.Shape, sets []string, targets []suite.Target, o suite.Options,
	skip func(*suite.Shape, suite.Target) bool, more func(suite.Target, suite.Fixture) map[string]func(*testing.B),
	after func(suite.Target, suite.Fixture)) []*result {
	var jobs []roundJob
	for _, sh := range shs {
		res := &result{shape: sh, m: map[string]map[string]meas{}, cost: map[string]suite.Cost{}}
		for _, s := range sets {
			res.m[s] = map[string]meas{}
		}
		var ts []suite.Target
		for _, t := range targets {
			if skip == nil || !skip(sh, t) {
				ts = append(ts, t)
			}
		}
		if o.Memory || after != nil {
			ts = r.alone(sh, ts, o, after, res)
		}
		jobs = append(jobs, roundJob{sh: sh, targets: ts, res: res})
	}
	o.Memory = false
	r.rounds(jobs, sets, o, more)
	rs := make([]*result, len(jobs))
	for i, j := range jobs {
		rs[i] = j.res
	}
	return rs
}

// alone is lookupsWith's first pass over sh: it builds each of targets
// alone, records its build cost in res, hands it to after if not nil and
// closes it. It returns the targets that could be built.
func (r *runner) alone(sh *suite.Shape, targets []suite.Target, o suite.Options, after func(suite.Target, suite.Fixture), res *result) []suite.Target {
	var ok []suite.Target
	for _, t := range targets {
		r.detail(" %s: building %s alone (%s sockets)", sh.Name, t.Name, fmtInt(len(sh.Socks)))
		f, cost, err := suite.Prepare(t, sh, o)
		if r.gaveUp("", err) {
			continue
		}
		res.cost[t.Name] = cost
		ok = append(ok, t)
		if after != nil {
			// A build ends with a collection under way, which would
			// charge its marking to after's writes: finish it.
			runtime.GC()
			after(t, f)
		}
		f.Close()
		runtime.GC()
	}
	return ok
}

// roundJob is one shape that rounds times: the targets to build it in,
// and the result its figures go to.
type roundJob struct {
	sh      *suite.Shape
	targets []suite.Target
	res     *result
}

// rounds builds each job's shape in each of its targets and times them
// all in rounds into the jobs' results (see lookupsWith and
// lookupsAcross); it leaves the results' build costs alone.
func (r *runner) rounds(jobs []roundJob, sets []string, o suite.Options,
	more func(suite.Target, suite.Fixture) map[string]func(*testing.B)) {
	type built struct {
		job   *roundJob
		t     suite.Target
		f     suite.Fixture
		sets  []string // the sets it answered right
		more  map[string]func(*testing.B)
		runs  map[string][]run            // set → its rounds so far
		bench map[string]func(*testing.B) // set → its benchmark
		bad   map[string]bool             // sets whose benchmark failed
	}
	bs := make([][]*built, len(jobs)) // by job
	defer func() {
		for _, jb := range bs {
			for _, b := range jb {
				b.f.Close()
			}
		}
		runtime.GC()
	}()
	for i := range jobs {
		j := &jobs[i]
		for _, t := range j.targets {
			r.detail(" %s: building %s (%s sockets)", j.sh.Name, t.Name, fmtInt(len(j.sh.Socks)))
			f, _, err := suite.Prepare(t, j.sh, o)
			if r.gaveUp("", err) {
				continue
			}
			b := &built{job: j, t: t, f: f, runs: map[string][]run{}, bench: map[string]func(*testing.B){}, bad: map[string]bool{}}
			for _, s := range sets {
				if err := f.Check(j.sh.SetIndex(s), checkMax); err != nil {
					r.fail("%s on %s, set %s: wrong answer: %v", t.Name, j.sh.Name, s, err)
					continue
				}
				b.sets = append(b.sets, s)
			}
			if more != nil {
				b.more = more(t, f)
			}
			bs[i] = append(bs[i], b)
		}
	}
	label := func(s string, b *built) string { return fmt.Sprintf("%s %s %s", b.job.sh.Name, s, b.t.Name) }
	measure := func(b *built, s string, f func(*testing.B)) {
		if b.bad[s] {
			return
		}
		one, ok := r.once(label(s, b), f)
		if !ok {
			b.bad[s] = true
			return
		}
		b.runs[s] = append(b.runs[s], one)
		b.bench[s] = f
	}
	var extra []string // the names more gave, in a fixed order
	for _, jb := range bs {
		for _, b := range jb {
			for name := range b.more {
				if !slices.Contains(extra, name) {
					extra = append(extra, name)
				}
			}
		}
	}
	slices.Sort(extra)
	for range r.c.runs {
		for _, jb := range bs {
			for _, s := range sets {
				for _, b := range jb {
					if slices.Contains(b.sets, s) {
						measure(b, s, b.f.Bench(b.job.sh.SetIndex(s)))
					}
				}
			}
			for _, name := range extra {
				for _, b := range jb {
					if f, ok := b.more[name]; ok {
						measure(b, name, f)
					}
				}
			}
		}
	}
	for _, jb := range bs {
		for _, b := range jb {
			res := b.job.res
			for _, s := range slices.Concat(b.sets, extra) {
				if rs, ok := b.runs[s]; ok && !b.bad[s] {
					if res.m[s] == nil {
						res.m[s] = map[string]meas{}
					}
					res.m[s][b.t.Name] = r.summary(label(s, b), rs, b.bench[s])
				}
			}
		}
	}
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
