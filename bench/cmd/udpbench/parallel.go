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

func (r *runner) parallel() {
	d := parallelTime.at(r.c.quick)
	r.printf("Lookups of the *bound* datagrams on 1 and 2 goroutines (this machine has %d logical CPUs, GOMAXPROCS %d) "+
		"for %v per measurement, each begun by a garbage collection as go test begins each benchmark (so that the garbage of the check after one measurement is not collected during the next), in %d pairs, alternately 1 goroutine then 2 and 2 then 1; "+
		"a shape's contenders are built together, and each pair measures every row without a writer in turn (then, in pairs of their own, the rows with one), so that a row's pairs are spread over the shape's run and a change of the machine's speed reaches every contender alike; "+
		"the rates are the medians, and the speed-up is "+
		"the median of the pairs' ratios, so that a change of the machine's load between pairs does not skew it, nor a drift within them favour one count; with no writer, with a writer binding and closing a socket %d times a "+
		"second, and with one binding and closing flat out on a goroutine of its own (so with 2 lookup goroutines, "+
		"3 goroutines share the CPUs). The writer's sockets share the primary slot of the same-port shape and never "+
		"receive the datagrams looked up; every lookup is checked, and a wrong answer fails the run. The map floor "+
		"cannot run with a writer. *hybrid*: udpdemux with %s slots; *udpdemux*: with the default `demux.Config{}`.\n\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), d, r.parallelPairs(), suite.PacedRate, fmtInt(lookupSlots))
	t := newTable("shape, contender, writer", "1 goroutine", "2 goroutines", "speed-up", "writer ops/s (2 goroutines)")
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
		r.parallelPairsOf(sh, quiet, d)
		r.parallelPairsOf(sh, written, d)
		for _, row := range rows {
			if row.failed || len(row.ups) == 0 {
				continue
			}
			rate, sp, wops := row.summary(r, sh)
			r.set(key{scen: scParallel, shape: at.shape, n: at.n, target: row.tg.Name, writer: row.w, m: speedupX}, sp)
			wcell := "—"
			if row.w != suite.NoWriter {
				wcell = fmtRate(wops)
			}
			t.add(fmt.Sprintf("%s, %s, %v", sh.Name, row.tg.Name, row.w), fmtRate(rate[1]), fmtRate(rate[2]), fmtX(sp), wcell)
		}
		for _, f := range fixtures {
			f.Close()
		}
		runtime.GC()
	}
	r.printf("%s\nColumns: lookups per second, all goroutines together (higher is better); *speed-up*: "+
		"2 goroutines ÷ 1; *writer ops/s*: the writer's bind+close pairs per second while 2 goroutines looked up.\n\n", t)
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
	rs     [3][]suite.ParallelResult // by goroutine count
	ups    []float64                 // each pair's speed-up
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
// row: pair i measures each row in turn, one goroutine then two in the
// even pairs and two then one in the odd. A row whose run fails or finds
// a wrong socket is reported and measured no more.
func (r *runner) parallelPairsOf(sh *suite.Shape, rows []*parallelRow, d time.Duration) {
	for i := range r.parallelPairs() {
		order := []int{1, 2}
		if i%2 == 1 {
			order = []int{2, 1}
		}
		for _, row := range rows {
			if row.failed {
				continue
			}
			for _, g := range order {
				res, err := suite.Parallel(row.f, 0, g, d, row.w)
				if err == nil && res.Wrong > 0 {
					err = fmt.Errorf("%d of %d lookups found the wrong socket", res.Wrong, res.Lookups)
				}
				if err != nil {
					r.fail("parallel %s on %s, %d goroutines, writer %v: %v", row.tg.Name, sh.Name, g, row.w, err)
					row.failed = true
					break
				}
				row.rs[g] = append(row.rs[g], res)
			}
			if !row.failed {
				row.ups = append(row.ups, row.rs[2][len(row.rs[2])-1].PerSec()/row.rs[1][len(row.rs[1])-1].PerSec())
			}
		}
	}
}

// summary returns the row's median rates on 1 and 2 goroutines (indexed
// by the count), the median of its pairs' speed-ups, and the writer's
// rate in the 2-goroutine measurement of the median rate.
func (row *parallelRow) summary(r *runner, sh *suite.Shape) (rate [3]float64, speedup, wops float64) {
	for _, g := range []int{1, 2} {
		rs := slices.Clone(row.rs[g])
		slices.SortFunc(rs, func(a, b suite.ParallelResult) int { return cmp.Compare(a.PerSec(), b.PerSec()) })
		m := rs[len(rs)/2]
		rate[g] = m.PerSec()
		if g == 2 {
			wops = float64(m.WriterOps) / m.Elapsed.Seconds()
		}
		r.detail("  %s %s writer=%v goroutines=%d: %s lookups", sh.Name, row.tg.Name, row.w, g, fmtRate(m.PerSec()))
	}
	return rate, median(row.ups), wops
}

func (r *runner) parallelGoals() []goal {
	var ps []place
	for _, tg := range []suite.Target{suite.Hybrid, suite.Default} {
		for _, at := range parallelShapes(r.c.quick) {
			ps = append(ps, place{fmt.Sprintf("%s, %s, %s sockets", tg.Name, at.shape, fmtInt(at.n)),
				r.val(key{scen: scParallel, shape: at.shape, n: at.n, target: tg.Name, writer: suite.NoWriter, m: speedupX})})
		}
	}
	return []goal{limit("Parallel lookups: 2 goroutines do at least 1.8× the lookups of 1 (hybrid and the default Config, no writer)", ps, false, 1.8, fmtX)}
}
