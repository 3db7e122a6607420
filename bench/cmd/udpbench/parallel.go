package main

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// parallelShapes returns the shapes of the parallel scenario.
func parallelShapes(quick bool) []shapeAt {
	if quick {
		return []shapeAt{{shSamePort, 1024}, {shDistinctPorts, 10000}}
	}
	return []shapeAt{{shSamePort, 4096}, {shDistinctPorts, 65000}}
}

// A parallel measurement's kind: how many lookup goroutines, and where.
type pkind int

const (
	free1 pkind = iota // 1 goroutine, wherever the kernel runs it
	free2              // 2 goroutines, unpinned
	onA                // 1 goroutine pinned to the first CPU
	onB                // 1 goroutine pinned to the second
	onAB               // 2 goroutines, one pinned to each CPU
	nkinds
)

// goroutines returns how many lookup goroutines a measurement of kind k runs.
func (k pkind) goroutines() int {
	if k == free2 || k == onAB {
		return 2
	}
	return 1
}

// parallelCPUs returns the two CPUs the pinned measurements use, or nil
// if there are not two to pin to.
func parallelCPUs() []int {
	if cpus := suite.CPUs(); len(cpus) >= 2 {
		return cpus[:2]
	}
	return nil
}

func (r *runner) parallel() {
	d := parallelTime.at(r.c.quick)
	cpus := parallelCPUs()
	how := "The machine has fewer than two CPUs this process may pin a thread to, so each pair measures 1 unpinned goroutine and 2, and the speed-up is theirs. "
	if cpus != nil {
		how = fmt.Sprintf("Each pair measures 1 goroutine and 2 unpinned, as go test would, then 1 goroutine on a thread pinned to CPU %d, 1 pinned to CPU %d, and 2, one pinned to each (in the reverse order in every other pair). "+
			"*speed-up* is the 2 pinned goroutines' rate over the mean of the two CPUs' rates alone, the median of the pairs' ratios; *unpinned* is the 2 unpinned goroutines' over the 1 unpinned one's. "+
			"The two differ because the CPUs of this virtual machine need not be alike: for tens of seconds at a time one of them ran these lookups at half the rate of the other "+
			"(the default Config's at 4 096 sockets on one port: 19.4–20.2 M/s on CPU 0 against 37.9–38.9 M/s on CPU 1 in six pairs in a row, then the other way round), "+
			"while 2 goroutines, one on each, did about the sum (54.5–59.3 M/s). A lone unpinned goroutine runs on whichever CPU the kernel picks, so the unpinned ratio says which CPU that was as much as how the lookups scale. ", cpus[0], cpus[1])
	}
	r.printf("Lookups of the *bound* datagrams on 1 and 2 goroutines (this machine has %d logical CPUs, GOMAXPROCS %d) "+
		"for %v per measurement, each begun by a garbage collection as go test begins each benchmark (so that the garbage of the check after one measurement is not collected during the next), in %d pairs. %s"+
		"Rows with a writer are measured unpinned only, and their speed-up is the unpinned one: a goroutine locked to its thread that waits for a lock a writer holds waits far longer than an unpinned one (gVisor's lookups with 10 000 bind+close/s: 148 k/s pinned, 1.55 M/s unpinned). "+
		"A shape's contenders are built together, and each pair measures every row without a writer in turn (then, in pairs of their own, the rows with one), so that a row's pairs are spread over the shape's run and a change of the machine's speed reaches every contender alike; "+
		"the rates are the medians, and the speed-ups are "+
		"the medians of the pairs' ratios, so that a change of the machine's load between pairs does not skew them. Writers: none, one binding and closing a socket %d times a "+
		"second, and one binding and closing flat out on a goroutine of its own, never pinned (so with 2 lookup goroutines, "+
		"3 goroutines share the CPUs). The writer's sockets share the primary slot of the same-port shape and never "+
		"receive the datagrams looked up; every lookup is checked, and a wrong answer fails the run. The map floor "+
		"cannot run with a writer. *hybrid*: udpdemux with %s slots; *udpdemux*: with the default `demux.Config{}`.\n\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), d, r.parallelPairs(), how, suite.PacedRate, fmtInt(lookupSlots))
	head := []string{"shape, contender, writer", "1 goroutine", "2 goroutines", "unpinned"}
	if cpus != nil {
		head = append(head, fmt.Sprintf("1 on CPU %d, on CPU %d", cpus[0], cpus[1]), "2, one on each", "speed-up")
	}
	t := newTable(append(head, "writer ops/s (2 goroutines)")...)
	for _, at := range parallelShapes(r.c.quick) {
		sh := at.make(lookupSlots, r.c.seed)
		rows, fixtures := r.parallelRows(sh)
		// The rows without a writer first, so that they look up tables
		// as built, as they did when each row was measured on its own.
		var quiet, written []*parallelRow
		for _, row := range rows {
			if row.w == suite.NoWriter {
				quiet = append(quiet, row)
			} else {
				written = append(written, row)
			}
		}
		r.parallelPairsOf(sh, quiet, cpus, d)
		// A goroutine locked to its thread that waits for a writer's
		// lock waits far longer than an unpinned one (gVisor, 10 000
		// bind+close/s: 148 k/s pinned, 1.55 M/s unpinned), so rows
		// with a writer are measured unpinned only.
		r.parallelPairsOf(sh, written, nil, d)
		for _, row := range rows {
			if row.failed || len(row.ups) == 0 {
				continue
			}
			rate, up, pup, wops := row.summary(r, sh)
			// The goal reads the pinned speed-up where there is one.
			sp := up
			if len(row.pups) > 0 {
				sp = pup
			}
			r.set(key{scen: scParallel, shape: at.shape, n: at.n, target: row.tg.Name, writer: row.w, m: speedupX}, sp)
			wcell := "—"
			if row.w != suite.NoWriter {
				wcell = fmtRate(wops)
			}
			cells := []string{fmt.Sprintf("%s, %s, %v", sh.Name, row.tg.Name, row.w), fmtRate(rate[free1]), fmtRate(rate[free2]), fmtX(up)}
			switch {
			case len(row.pups) > 0:
				cells = append(cells, fmtRate(rate[onA])+", "+fmtRate(rate[onB]), fmtRate(rate[onAB]), fmtX(pup))
			case cpus != nil:
				cells = append(cells, "—", "—", "—")
			}
			t.add(append(cells, wcell)...)
		}
		for _, f := range fixtures {
			f.Close()
		}
		runtime.GC()
	}
	r.printf("%s\nColumns: lookups per second, all goroutines together (higher is better); *unpinned*: 2 unpinned goroutines ÷ 1; "+
		"*speed-up*: 2 goroutines, one pinned to each CPU, ÷ the mean of 1 pinned to each; "+
		"*writer ops/s*: the writer's bind+close pairs per second while 2 unpinned goroutines looked up.\n\n", t)
}

// parallelPairs is how many pairs of measurements a parallel row takes:
// parallelPairs, or -runs if more.
func (r *runner) parallelPairs() int { return max(r.c.runs, parallelPairs.at(r.c.quick)) }

// parallelRow is one row of the parallel scenario: a contender and a
// writer mode, with the measurements taken so far. The rows of one
// contender share its fixture.
type parallelRow struct {
	tg     suite.Target
	f      suite.Fixture
	w      suite.Writer
	rs     [nkinds][]suite.ParallelResult // by kind
	ups    []float64                      // each pair's unpinned speed-up
	pups   []float64                      // each pair's pinned speed-up
	failed bool
}

// parallelRows builds and checks every contender of sh and returns its
// rows, writers in the order of the table, and the fixtures, which the
// caller closes. A contender that fails to build or to answer is reported
// and left out.
func (r *runner) parallelRows(sh *suite.Shape) ([]*parallelRow, []suite.Fixture) {
	var rows []*parallelRow
	var fixtures []suite.Fixture
	for _, tg := range []suite.Target{suite.Hybrid, suite.Default, suite.GVisor, suite.Floor} {
		f, _, err := suite.Prepare(tg, sh, suite.Options{})
		if err != nil {
			r.fail("%v", err)
			continue
		}
		if err := f.Check(0, checkMax); err != nil {
			r.fail("%s on %s: wrong answer: %v", tg.Name, sh.Name, err)
			f.Close()
			continue
		}
		fixtures = append(fixtures, f)
		for _, w := range []suite.Writer{suite.NoWriter, suite.PacedWriter, suite.FlatOutWriter} {
			if tg == suite.Floor && w != suite.NoWriter {
				continue
			}
			rows = append(rows, &parallelRow{tg: tg, f: f, w: w})
		}
	}
	return rows, fixtures
}

// parallelPairsOf takes r.parallelPairs() pairs of measurements of every
// row: pair i measures each row in turn, every kind of measurement once
// (the unpinned ones only if cpus is nil), in one order in the even pairs
// and in the reverse order in the odd. A row whose run fails or finds a
// wrong socket is reported and measured no more.
func (r *runner) parallelPairsOf(sh *suite.Shape, rows []*parallelRow, cpus []int, d time.Duration) {
	order := []pkind{free1, free2}
	if cpus != nil {
		order = append(order, onA, onB, onAB)
	}
	for i := range r.parallelPairs() {
		o := slices.Clone(order)
		if i%2 == 1 {
			slices.Reverse(o)
		}
		for _, row := range rows {
			if row.failed {
				continue
			}
			var got [nkinds]float64
			for _, k := range o {
				var res suite.ParallelResult
				var err error
				switch k {
				case free1, free2:
					res, err = suite.Parallel(row.f, 0, k.goroutines(), d, row.w)
				case onA:
					res, err = suite.ParallelOn(row.f, 0, cpus[:1], d, row.w)
				case onB:
					res, err = suite.ParallelOn(row.f, 0, cpus[1:2], d, row.w)
				case onAB:
					res, err = suite.ParallelOn(row.f, 0, cpus[:2], d, row.w)
				}
				if err == nil && res.Wrong > 0 {
					err = fmt.Errorf("%d of %d lookups found the wrong socket", res.Wrong, res.Lookups)
				}
				if err != nil {
					r.fail("parallel %s on %s, %d goroutines, writer %v: %v", row.tg.Name, sh.Name, k.goroutines(), row.w, err)
					row.failed = true
					break
				}
				row.rs[k] = append(row.rs[k], res)
				got[k] = res.PerSec()
			}
			if row.failed {
				continue
			}
			row.ups = append(row.ups, got[free2]/got[free1])
			if cpus != nil {
				row.pups = append(row.pups, got[onAB]/((got[onA]+got[onB])/2))
			}
		}
	}
}

// summary returns the row's median rate of each kind of measurement, the
// medians of its pairs' unpinned and pinned speed-ups (NaN if none), and
// the writer's rate in the unpinned 2-goroutine measurement of the median
// rate.
func (row *parallelRow) summary(r *runner, sh *suite.Shape) (rate [nkinds]float64, up, pup, wops float64) {
	for k := range nkinds {
		rs := slices.Clone(row.rs[k])
		if len(rs) == 0 {
			continue
		}
		slices.SortFunc(rs, func(a, b suite.ParallelResult) int { return cmp.Compare(a.PerSec(), b.PerSec()) })
		m := rs[len(rs)/2]
		rate[k] = m.PerSec()
		if k == free2 {
			wops = float64(m.WriterOps) / m.Elapsed.Seconds()
		}
		r.detail("  %s %s writer=%v %s: %s lookups", sh.Name, row.tg.Name, row.w, k, fmtRate(m.PerSec()))
	}
	return rate, median(slices.Clone(row.ups)), median(slices.Clone(row.pups)), wops
}

// String names the kind for the detail log.
func (k pkind) String() string {
	return [...]string{"1 unpinned", "2 unpinned", "1 on the first CPU", "1 on the second CPU", "2 one on each CPU"}[k]
}

func (r *runner) parallelGoals() []goal {
	var ps []place
	for _, tg := range []suite.Target{suite.Hybrid, suite.Default} {
		for _, at := range parallelShapes(r.c.quick) {
			ps = append(ps, place{fmt.Sprintf("%s, %s, %s sockets", tg.Name, at.shape, fmtInt(at.n)),
				r.val(key{scen: scParallel, shape: at.shape, n: at.n, target: tg.Name, writer: suite.NoWriter, m: speedupX})})
		}
	}
	name := "Parallel lookups: 2 goroutines do at least 1.8× the lookups of 1 (hybrid and the default Config, no writer"
	if parallelCPUs() != nil {
		name += "; one pinned to each CPU, against the mean of 1 pinned to each"
	}
	return []goal{limit(name+")", ps, false, 1.8, fmtX)}
}
