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
		"for %v per measurement, each begun by a garbage collection as go test begins each benchmark (so that the garbage of the check after one measurement is not collected during the next), in %d pairs, alternately 1 goroutine then 2 and 2 then 1; the rates are the medians, and the speed-up is "+
		"the median of the pairs' ratios, so that a change of the machine's load between pairs does not skew it, nor a drift within them favour one count; with no writer, with a writer binding and closing a socket %d times a "+
		"second, and with one binding and closing flat out on a goroutine of its own (so with 2 lookup goroutines, "+
		"3 goroutines share the CPUs). The writer's sockets share the primary slot of the same-port shape and never "+
		"receive the datagrams looked up; every lookup is checked, and a wrong answer fails the run. The map floor "+
		"cannot run with a writer. *hybrid*: udpdemux with %s slots; *udpdemux*: with the default `demux.Config{}`.\n\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), d, r.parallelPairs(), suite.PacedRate, fmtInt(lookupSlots))
	t := newTable("shape, contender, writer", "1 goroutine", "2 goroutines", "speed-up", "writer ops/s (2 goroutines)")
	for _, at := range parallelShapes(r.c.quick) {
		sh := at.make(lookupSlots, r.c.seed)
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
			for _, w := range []suite.Writer{suite.NoWriter, suite.PacedWriter, suite.FlatOutWriter} {
				if tg == suite.Floor && w != suite.NoWriter {
					continue
				}
				rate, sp, wops, ok := r.parallelRates(f, sh, tg, w, d)
				if !ok {
					continue
				}
				r.set(key{scen: scParallel, shape: at.shape, n: at.n, target: tg.Name, writer: w, m: speedupX}, sp)
				wcell := "—"
				if w != suite.NoWriter {
					wcell = fmtRate(wops)
				}
				t.add(fmt.Sprintf("%s, %s, %v", sh.Name, tg.Name, w), fmtRate(rate[1]), fmtRate(rate[2]), fmtX(sp), wcell)
			}
			f.Close()
			runtime.GC()
		}
	}
	r.printf("%s\nColumns: lookups per second, all goroutines together (higher is better); *speed-up*: "+
		"2 goroutines ÷ 1; *writer ops/s*: the writer's bind+close pairs per second while 2 goroutines looked up.\n\n", t)
}

// parallelPairs is how many pairs of measurements a parallel row takes:
// parallelPairs, or -runs if more.
func (r *runner) parallelPairs() int { return max(r.c.runs, parallelPairs.at(r.c.quick)) }

// parallelRates measures the lookup rates on 1 and 2 goroutines (indexed
// by the count), in r.parallelPairs() pairs, one goroutine then two in the
// even pairs and two then one in the odd. It returns the median rates, the
// median of the pairs' speed-ups, and the writer's rate in the
// 2-goroutine measurement of the median rate.
func (r *runner) parallelRates(f suite.Fixture, sh *suite.Shape, tg suite.Target, w suite.Writer, d time.Duration) (rate [3]float64, speedup, wops float64, ok bool) {
	var rs [3][]suite.ParallelResult
	var ups []float64
	for i := range r.parallelPairs() {
		order := []int{1, 2}
		if i%2 == 1 {
			order = []int{2, 1}
		}
		for _, g := range order {
			res, err := suite.Parallel(f, 0, g, d, w)
			if err != nil {
				r.fail("parallel %s on %s, %d goroutines, writer %v: %v", tg.Name, sh.Name, g, w, err)
				return rate, 0, 0, false
			}
			if res.Wrong > 0 {
				r.fail("parallel %s on %s, %d goroutines, writer %v: %d of %d lookups found the wrong socket",
					tg.Name, sh.Name, g, w, res.Wrong, res.Lookups)
				return rate, 0, 0, false
			}
			rs[g] = append(rs[g], res)
		}
		ups = append(ups, rs[2][len(rs[2])-1].PerSec()/rs[1][len(rs[1])-1].PerSec())
	}
	for _, g := range []int{1, 2} {
		slices.SortFunc(rs[g], func(a, b suite.ParallelResult) int { return cmp.Compare(a.PerSec(), b.PerSec()) })
		m := rs[g][len(rs[g])/2]
		rate[g] = m.PerSec()
		if g == 2 {
			wops = float64(m.WriterOps) / m.Elapsed.Seconds()
		}
		r.detail("  %s %s writer=%v goroutines=%d: %s lookups", sh.Name, tg.Name, w, g, fmtRate(m.PerSec()))
	}
	return rate, median(ups), wops, true
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
