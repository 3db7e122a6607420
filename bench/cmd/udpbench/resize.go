package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/udpdemux/udpdemux/bench/suite"
)

func resizeSizes(quick bool) (from, to int) {
	if quick {
		return 1000, 20000
	}
	return 1000, 1000000
}

func (r *runner) resize() {
	from, to := resizeSizes(r.c.quick)
	const g = 2
	r.printf("A table made with `demux.Config{}` holds %s sockets (one port, distinct addresses, every other socket "+
		"connected to a peer of its own, so that both the (address, port) table and the 4-tuple table grow); one "+
		"goroutine binds sockets up to %s while %d goroutines look up datagrams to sockets bound before each lookup "+
		"began, picked at random, timing every lookup (each time includes a reading of the clock). A lookup that "+
		"misses its socket or finds another is *wrong*. Then the same goroutines look up at the final size with no "+
		"writer, for as long as the growth took (0.2 to 2 s): the median of a table already at size. During the growth "+
		"the lookups go to a table that holds fewer sockets on average, which favours it; the worst lookup includes any "+
		"time the goroutine was descheduled (3 goroutines share the CPUs). One run.\n\n",
		fmtInt(from), fmtInt(to), g)
	res, err := suite.Resize(from, to, g, r.c.seed, 2*r.buildBudget())
	if r.gaveUp("resize", err) {
		return
	}
	if res.Wrong > 0 {
		r.fail("resize: %d of %d lookups missed their socket or found another", res.Wrong, res.Lookups+res.LookupsAtSize)
	}
	k := key{scen: scResize, n: to, target: suite.Default.Name}
	for m, v := range map[metric]float64{
		wrongCount: float64(res.Wrong), worstNs: float64(res.Worst), medianNs: float64(res.Median),
	} {
		k.m = m
		r.set(k, v)
	}
	r.set(key{scen: scResize, n: to, shape: "at size", target: suite.Default.Name, m: medianNs}, float64(res.MedianAtSize))
	r.detail("  resize %d→%d: %v, %d lookups, wrong %d, median %v (at size %v), worst %v",
		from, to, res.Grow.Round(time.Millisecond), res.Lookups, res.Wrong, res.Median, res.MedianAtSize, res.Worst)
	t := newTable("growth", "took", "lookups", "wrong", "median lookup", "worst lookup", "median at size", "median ÷ at size")
	t.add(fmt.Sprintf("%s → %s", fmtInt(from), fmtInt(to)), res.Grow.Round(time.Millisecond).String(),
		fmtInt(int(res.Lookups)), fmtInt(int(res.Wrong)), fmtNs(float64(res.Median)), fmtNs(float64(res.Worst)),
		fmtNs(float64(res.MedianAtSize)), fmtX(float64(res.Median)/float64(res.MedianAtSize)))
	r.printf("%s\nColumns: *took*: the time to bind from %s to %s sockets with the lookups running; *lookups*: "+
		"lookups during the growth; *wrong*: lookups that missed or misdirected (must be 0, over both phases); "+
		"*median lookup*, *worst lookup*: during the growth; *median at size*: at %s sockets with no writer; "+
		"*median ÷ at size*: how many times slower the median lookup was during the growth (lower is better).\n\n",
		t, fmtInt(from), fmtInt(to), fmtInt(to))
	runtime.GC()
}

func (r *runner) resizeGoals() []goal {
	from, to := resizeSizes(r.c.quick)
	k := key{scen: scResize, n: to, target: suite.Default.Name}
	at := func(m metric) float64 { k.m = m; return r.val(k) }
	atSize := r.val(key{scen: scResize, n: to, shape: "at size", target: suite.Default.Name, m: medianNs})
	span := fmt.Sprintf("growing from %s to %s sockets", fmtInt(from), fmtInt(to))
	worst := at(worstNs)
	return []goal{
		limit("Resize under load: no wrong or missed lookup, "+span, []place{{"", at(wrongCount)}}, true, 0,
			func(x float64) string { return fmt.Sprintf("%.0f wrong", x) }),
		limit("Resize under load: median lookup ≤ 2× that of a table already at size, "+span,
			[]place{{"worst lookup " + fmtNs(worst), at(medianNs) / atSize}}, true, 2, fmtX),
	}
}
