package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// lookupSlots is the table size of udpdemux in the lookup scenarios: the
// largest that Linux allows (uhash_entries), as in the 2009 threads.
const lookupSlots = 65536

// record stores the figures of res for the goals, under prefix/set/target.
func (r *runner) record(prefix string, res *result) {
	for set, ms := range res.m {
		for t, m := range ms {
			if m.ok {
				r.vals[prefix+"/"+set+"/"+t] = m.ns
			}
		}
	}
}

// val returns a recorded figure, or NaN.
func (r *runner) val(key string) float64 {
	if v, ok := r.vals[key]; ok {
		return v
	}
	return nan()
}

func (r *runner) s1() {
	sizes := []int{256, 512, 4096, 65536}
	if r.c.quick {
		sizes = []int{256, 4096}
	}
	r.printf("n sockets on port %d at distinct IPv4 addresses (10.0.0.1, …) plus one on 0.0.0.0, all with SO_REUSEADDR; "+
		"udpdemux with %d slots. *bound*: datagrams to the bound addresses; *wildcard*: datagrams to addresses "+
		"that only the 0.0.0.0 socket serves. Time per lookup, with its ratio to the map floor in parentheses.\n\n",
		suite.SamePortPort, lookupSlots)
	t := newTable(lookupHeader("sockets, datagrams to")...)
	var all []*result
	for _, n := range sizes {
		sh := suite.SamePort(n, lookupSlots, r.c.seed)
		res := r.lookups(sh, []string{"bound", "wildcard"}, suite.Targets, suite.Options{}, nil)
		all = append(all, res)
		r.record(fmt.Sprintf("s1/%d", n), res)
		for _, set := range []string{"bound", "wildcard"} {
			t.add(lookupRow(fmt.Sprintf("%s, %s", fmtInt(n), set), func(tg string) meas { return res.get(set, tg) })...)
		}
	}
	r.printf("%s\n", t)
	r.allocNote(all...)
}

func (r *runner) s2() {
	n := 65000
	if r.c.quick {
		n = 10000
	}
	r.printf("%s sockets on 0.0.0.0 at distinct ports, udpdemux with %d slots (one port per primary slot); "+
		"datagrams to 10.0.0.1 at the bound ports. Two-phase pays a probe of the exact-address secondary slot "+
		"before the wildcard one.\n\n", fmtInt(n), lookupSlots)
	sh := suite.DistinctPorts(n, lookupSlots, r.c.seed)
	res := r.lookups(sh, []string{"bound"}, suite.Targets, suite.Options{}, nil)
	r.record("s2", res)
	t := newTable(lookupHeader("sockets")...)
	t.add(lookupRow(fmtInt(n), func(tg string) meas { return res.get("bound", tg) })...)
	r.printf("%s\n", t)
	r.allocNote(res)
}

func (r *runner) s3() {
	total := 32768
	ks := []int{1, 2, 4, 8, 10, 11, 12, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
	if r.c.quick {
		total = 4096
		ks = []int{1, 2, 4, 8, 11, 16, 64, 512}
	}
	r.printf("%s sockets in all, k on each port at distinct IPv4 addresses (so %s/k ports); udpdemux with %d slots; "+
		"datagrams to the bound sockets. The hybrid rule (threshold %d) searches the secondary table when a port's "+
		"primary slot holds more than %d sockets.\n\n", fmtInt(total), fmtInt(total), lookupSlots, 10, 10)
	head := append(lookupHeader("k per port"), "hybrid vs best strategy")
	t := newTable(head...)
	ser := map[string]*series{}
	for _, tg := range suite.Targets {
		ser[tg.Name] = &series{name: tg.Name}
	}
	var all []*result
	var cross []int // the k where two-phase is faster than one-phase
	for _, k := range ks {
		sh := suite.PerPort(total, k, lookupSlots, r.c.seed)
		res := r.lookups(sh, []string{"bound"}, suite.Targets, suite.Options{}, nil)
		all = append(all, res)
		r.record(fmt.Sprintf("s3/%d", k), res)
		get := func(tg string) meas { return res.get("bound", tg) }
		row := lookupRow(fmt.Sprintf("%d (%s ports)", k, fmtInt(max(total/k, 1))), get)
		one, two, hyb := get(suite.OnePhase.Name), get(suite.TwoPhase.Name), get(suite.Hybrid.Name)
		if one.ok && two.ok && hyb.ok {
			row = append(row, fmtX(hyb.ns/math.Min(one.ns, two.ns)))
			if two.ns < one.ns {
				cross = append(cross, k)
			}
		} else {
			row = append(row, "—")
		}
		t.add(row...)
		for _, tg := range suite.Targets {
			if m := get(tg.Name); m.ok {
				ser[tg.Name].add(float64(k), m.ns)
			}
		}
	}
	r.printf("%s\n", t)
	r.allocNote(all...)
	// The crossover: the smallest k from which two-phase stays faster.
	cx := -1
	for i := len(ks) - 1; i >= 0; i-- {
		if !slices.Contains(cross, ks[i]) {
			break
		}
		cx = ks[i]
	}
	switch {
	case cx < 0:
		r.printf("**Crossover:** two-phase was not faster than one-phase at the largest k measured; " +
			"on this machine the secondary table never pays off in this sweep.\n\n")
	case cx == ks[0]:
		r.printf("**Crossover:** two-phase was faster than one-phase at every k measured, down to %d.\n\n", cx)
	default:
		prev := ks[slices.Index(ks, cx)-1]
		r.vals["s3/crossover"] = float64(cx)
		r.printf("**Crossover:** two-phase is faster than one-phase from k = %d sockets per port on "+
			"(and slower at k = %d). The hybrid rule with threshold T switches at k = T+1, "+
			"so the threshold that matches this machine is about %d–%d. ", cx, prev, prev, cx-1)
		if prev <= 10 && 10 <= cx-1 || cx-1 == 10 {
			r.printf("The default of 10 is in that interval: keep it.\n\n")
		} else if lo, hi := prev, cx-1; 10 >= lo/2 && 10 <= 2*hi {
			r.printf("The default of 10 is within a factor of two of it; around the crossover the two strategies " +
				"differ little (see the table), so changing it buys little.\n\n")
		} else {
			r.printf("The default of 10 is far from it: consider a threshold of about %d on machines like this one.\n\n", cx-1)
		}
	}
	var ss []series
	for _, tg := range suite.Targets {
		ss = append(ss, *ser[tg.Name])
	}
	r.plot("lookup-per-port.svg", fmt.Sprintf("Lookup time vs sockets per port (%s sockets)", fmtInt(total)),
		"sockets per port", "ns per lookup", ss, nil)
}

func (r *runner) s4() {
	n := 50000
	if r.c.quick {
		n = 5000
	}
	r.printf("A DNS forwarder: 16 service sockets on 10.0.0.1…16 port 53 (SO_REUSEADDR), 8 sockets on 10.0.0.1…8 "+
		"port 53 connected to one client each, and %s client sockets on 0.0.0.0 at distinct random ports of "+
		"10000–65535 connected to one of 4 upstream resolvers (their source address becomes one of 10.0.0.1…16). "+
		"*queries*: clients to the service; *replies*: upstreams to the client sockets; *peers*: the 8 connected "+
		"clients; *mix*: 50 %% queries, 45 %% replies, 5 %% peers. The map floor is keyed by the 4-tuple here. "+
		"udpdemux with %d slots.\n\n", fmtInt(n), lookupSlots)
	sh := suite.Mixed(n, lookupSlots, r.c.seed)
	sets := []string{"queries", "replies", "peers", "mix"}
	res := r.lookups(sh, sets, suite.Targets, suite.Options{}, nil)
	r.record("s4", res)
	t := newTable(lookupHeader("datagrams")...)
	for _, s := range sets {
		t.add(lookupRow(s, func(tg string) meas { return res.get(s, tg) })...)
	}
	r.printf("%s\n", t)
	r.allocNote(res)
}

func (r *runner) s5() {
	same := []int{1000, 10000, 100000, 1000000}
	distinct := []int{1000, 10000, 65000}
	if r.c.quick {
		same, distinct = []int{1000, 10000}, []int{1000, 10000}
	}
	const onePhaseMax = 65536
	r.printf("Shape 1 (one port, distinct addresses, plus the 0.0.0.0 socket) and shape 2 (0.0.0.0 at distinct ports; "+
		"at most 65 000 since there are 65 535 ports) from 1 000 sockets up; udpdemux with %d slots. "+
		"One-phase is not run above %s sockets on one port: every bind and lookup scans the whole chain, so building "+
		"the table is quadratic. *Bind* is the time to build the table divided by the sockets (for gVisor, "+
		"`ReservePort` then `RegisterTransportEndpoint`, as its UDP bind does; for the floor, a map insert). "+
		"*Heap* is the growth of the live heap after a garbage collection, divided by the sockets (the fixed cost "+
		"of the %d-slot tables included).\n\n", lookupSlots, fmtInt(onePhaseMax), lookupSlots)
	look := newTable(lookupHeader("shape, sockets")...)
	bind := newTable("shape, sockets", "one-phase", "two-phase", "hybrid", "gVisor", "map floor")
	heap := newTable("shape, sockets", "one-phase", "two-phase", "hybrid", "gVisor", "map floor")
	var all []*result
	plots := map[string]map[string]*series{}
	for _, shape := range []string{"same-port", "distinct-ports"} {
		plots[shape] = map[string]*series{}
		for _, tg := range suite.Targets {
			plots[shape][tg.Name] = &series{name: tg.Name}
		}
		sizes := same
		if shape == "distinct-ports" {
			sizes = distinct
		}
		for _, n := range sizes {
			var sh *suite.Shape
			if shape == "same-port" {
				sh = suite.SamePort(n, lookupSlots, r.c.seed)
			} else {
				sh = suite.DistinctPorts(n, lookupSlots, r.c.seed)
			}
			skip := func(t suite.Target) bool { return t == suite.OnePhase && shape == "same-port" && n > onePhaseMax }
			res := r.lookups(sh, []string{"bound"}, suite.Targets, suite.Options{Memory: true, Reserve: true}, skip)
			all = append(all, res)
			r.record(fmt.Sprintf("s5/%s/%d", shape, n), res)
			label := fmt.Sprintf("%s, %s", shape, fmtInt(n))
			look.add(lookupRow(label, func(tg string) meas { return res.get("bound", tg) })...)
			brow, hrow := []string{label}, []string{label}
			for _, tg := range suite.Targets {
				c, ok := res.cost[tg.Name]
				if !ok {
					brow, hrow = append(brow, "—"), append(hrow, "—")
					continue
				}
				ns, by := c.PerSocket(len(sh.Socks))
				brow = append(brow, fmtNs(ns))
				hrow = append(hrow, fmt.Sprintf("%.0f B", by))
				if m := res.get("bound", tg.Name); m.ok {
					plots[shape][tg.Name].add(float64(n), m.ns)
				}
			}
			bind.add(brow...)
			heap.add(hrow...)
			sh = nil
			runtime.GC()
		}
	}
	r.printf("Lookup:\n\n%s\nBind (per socket, while building the table):\n\n%s\nHeap per socket:\n\n%s\n", look, bind, heap)
	r.allocNote(all...)
	for _, shape := range []string{"same-port", "distinct-ports"} {
		sizes := same
		if shape == "distinct-ports" {
			sizes = distinct
		}
		for _, tg := range []suite.Target{suite.Hybrid, suite.Floor} {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, n := range sizes {
				v := r.val(fmt.Sprintf("s5/%s/%d/bound/%s", shape, n, tg.Name))
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
			r.vals["s5/"+shape+"/"+tg.Name+"/spread"] = hi / lo
			r.printf("- %s, %s: slowest ÷ fastest lookup from %s to %s sockets = %s\n", shape, tg.Name,
				fmtInt(sizes[0]), fmtInt(sizes[len(sizes)-1]), fmtX(hi/lo))
		}
	}
	r.printf("\nThe floor's spread is what the memory hierarchy alone does to one random probe as the table grows past the caches.\n\n")
	for _, shape := range []string{"same-port", "distinct-ports"} {
		var ss []series
		for _, tg := range suite.Targets {
			ss = append(ss, *plots[shape][tg.Name])
		}
		r.plot("scale-"+shape+".svg", "Lookup time vs table size ("+shape+")", "sockets", "ns per lookup", ss, nil)
	}
}

func (r *runner) s6() {
	d := 500 * time.Millisecond
	shapes := []*suite.Shape{suite.SamePort(4096, lookupSlots, r.c.seed), suite.DistinctPorts(65000, lookupSlots, r.c.seed)}
	if r.c.quick {
		d = 100 * time.Millisecond
		shapes = []*suite.Shape{suite.SamePort(1024, lookupSlots, r.c.seed), suite.DistinctPorts(10000, lookupSlots, r.c.seed)}
	}
	r.printf("Lookups of the *bound* datagrams on 1 and 2 goroutines (this machine has %d logical CPUs, GOMAXPROCS %d) "+
		"for %v per measurement, median of %d; with no writer, with a writer binding and closing a socket %d times a "+
		"second, and with one binding and closing flat out on a goroutine of its own (so with 2 lookup goroutines, "+
		"3 goroutines share the CPUs). The writer's sockets share the primary slot of the same-port shape and never "+
		"receive the datagrams looked up; every lookup is checked, and a wrong answer fails the run. The map floor "+
		"cannot run with a writer.\n\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), d, r.c.runs, suite.PacedRate)
	t := newTable("shape, contender, writer", "1 goroutine", "2 goroutines", "speed-up", "writer ops/s (2 goroutines)")
	for _, sh := range shapes {
		for _, tg := range []suite.Target{suite.Hybrid, suite.GVisor, suite.Floor} {
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
			p := f.(suite.Paralleler)
			for _, w := range []suite.Writer{suite.NoWriter, suite.PacedWriter, suite.FlatOutWriter} {
				if tg == suite.Floor && w != suite.NoWriter {
					continue
				}
				var rate [3]float64
				var wops float64
				failed := false
				for _, g := range []int{1, 2} {
					var rs []suite.ParallelResult
					for range r.c.runs {
						res, err := p.Parallel(0, g, d, w)
						if err != nil {
							r.fail("parallel %s on %s, %d goroutines, writer %v: %v", tg.Name, sh.Name, g, w, err)
							failed = true
							break
						}
						if res.Wrong > 0 {
							r.fail("parallel %s on %s, %d goroutines, writer %v: %d of %d lookups found the wrong socket",
								tg.Name, sh.Name, g, w, res.Wrong, res.Lookups)
							failed = true
						}
						rs = append(rs, res)
					}
					if failed {
						break
					}
					slices.SortFunc(rs, func(a, b suite.ParallelResult) int { return cmp.Compare(a.PerSec(), b.PerSec()) })
					m := rs[len(rs)/2]
					rate[g] = m.PerSec()
					if g == 2 {
						wops = float64(m.WriterOps) / m.Elapsed.Seconds()
					}
					r.progress("  %s %s writer=%v goroutines=%d: %s lookups", sh.Name, tg.Name, w, g, fmtRate(m.PerSec()))
				}
				if failed {
					continue
				}
				sp := rate[2] / rate[1]
				r.vals[fmt.Sprintf("s6/%s/%s/%d/speedup", sh.Name, tg.Name, w)] = sp
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
	r.printf("%s\n", t)
}

func (r *runner) s7() {
	frees := []int{5000, 100, 10, 1, 0}
	targets := slices.Clone(suite.Bind0Targets)
	if r.c.kernel {
		targets = append(targets, suite.Kernel)
	}
	r.printf("bind(0) on 0.0.0.0 then close, in a %s-port ephemeral range (%d–%d) where every port but the free ones "+
		"(scattered at random) holds a socket on 0.0.0.0; udpdemux with %d slots, the UDP hash size Linux chose on "+
		"this machine kind. udpdemux's algorithms: *pre-2009 linear* (random start, port after port, the chain "+
		"rescanned for each), *kernel bitmap* (Linux since 2.6.30), *occupancy index* (the default). gVisor: "+
		"`PortManager.ReservePort` with port 0 then `ReleasePort`. Linux: `socket`, `bind` to port 0 and `close` "+
		"in a network namespace whose `ip_local_port_range` is the same range (the `socket` call is included: a "+
		"socket cannot be bound twice).\n\n",
		fmtInt(suite.Bind0Range), suite.Bind0Low, suite.Bind0High, suite.Bind0Slots)
	ms := map[int]map[string]meas{}
	kernelOK := r.c.kernel
	for _, free := range frees {
		ms[free] = map[string]meas{}
		for _, tg := range targets {
			if tg == suite.Kernel && !kernelOK {
				continue
			}
			r.progress(" bind(0), %d free: %s", free, tg.Name)
			f, err := suite.PrepareBind0(tg, free, r.c.seed)
			if err == nil {
				err = f.Check()
			}
			if err != nil {
				if tg == suite.Kernel && errors.Is(err, suite.ErrNoNamespace) {
					kernelOK = false
					r.notes = append(r.notes, fmt.Sprintf("Linux bind(0) not measured: %v", err))
					r.printf("Linux not measured: %v.\n\n", err)
					continue
				}
				r.fail("bind(0) %s, %d free: %v", tg.Name, free, err)
				if f != nil {
					f.Close()
				}
				continue
			}
			m := r.bench(fmt.Sprintf("bind(0) %d free %s", free, tg.Name), f.Bench())
			f.Close()
			ms[free][tg.Name] = m
			if m.ok {
				r.vals[fmt.Sprintf("s7/%d/%s", free, tg.Name)] = m.ns
			}
			runtime.GC()
		}
	}
	head := []string{"free ports"}
	for _, tg := range targets {
		head = append(head, tg.Name)
	}
	head = append(head, "index vs gVisor", "index vs Linux")
	t := newTable(head...)
	ser := map[string]*series{}
	for _, tg := range targets {
		ser[tg.Name] = &series{name: tg.Name}
	}
	for _, free := range frees {
		row := []string{fmt.Sprint(free)}
		if free == 0 {
			row[0] = "0 (bind fails)"
		}
		for _, tg := range targets {
			m, ok := ms[free][tg.Name]
			if !ok || !m.ok {
				row = append(row, "—")
				continue
			}
			row = append(row, fmtNs(m.ns))
			ser[tg.Name].add(bind0X(free), m.ns/1e3)
		}
		idx := ms[free][suite.Index.Name]
		for _, other := range []string{suite.GVisorPorts.Name, suite.Kernel.Name} {
			if o, ok := ms[free][other]; ok && o.ok && idx.ok {
				row = append(row, fmtX(o.ns/idx.ns)+" faster")
			} else {
				row = append(row, "—")
			}
		}
		t.add(row...)
	}
	r.printf("%s\n", t)
	if kernelOK {
		m := r.bench("linux socket+close (no bind)", suite.KernelSocketClose())
		if m.ok {
			r.printf("For scale: `socket` + `close` alone, without `bind`, take %s in Linux.\n\n", fmtNs(m.ns))
		}
	}
	var ss []series
	for _, tg := range targets {
		if len(ser[tg.Name].xs) > 0 {
			ss = append(ss, *ser[tg.Name])
		}
	}
	var ticks []tick
	for _, free := range frees {
		label := fmt.Sprint(free)
		if free == 0 {
			label = "0 (full)"
		}
		ticks = append(ticks, tick{bind0X(free), label})
	}
	r.plot("bind0.svg", fmt.Sprintf("bind(0) time vs free ports (%s-port range)", fmtInt(suite.Bind0Range)),
		"free ports", "µs per bind(0)+close", ss, ticks)
	r.repro()
}

// bind0X places a number of free ports on the plot's logarithmic x axis,
// with 0 (a full range) left of 1.
func bind0X(free int) float64 {
	if free == 0 {
		return 0.3
	}
	return float64(free)
}

// repro runs the seed thread's reproducer.
func (r *runner) repro() {
	const g, free = 64, 128
	d := 2 * time.Second
	if r.c.quick {
		d = 200 * time.Millisecond
	}
	r.printf("**The seed thread's reproducer**: the same range, all but %d ports (scattered) in use; %d goroutines "+
		"each loop: bind(0) on 0.0.0.0, close the sockets on the two neighbouring ports (binding a port again when "+
		"its socket was one of those filled in before the run, so that the range stays almost full), close its own "+
		"socket of the previous round. %v per contender. Afterwards the contender must hold exactly the sockets the "+
		"goroutines think are open (and udpdemux's table must pass Verify).\n\n", free, g, d)
	t := newTable("contender", "bind(0)/s", "failed bind(0)", "neighbours closed", "free ports at the end", "check")
	for _, tg := range suite.Bind0Targets {
		r.progress(" reproducer: %s", tg.Name)
		res, err := suite.Reproduce(tg, g, free, d, r.c.seed)
		check := "ok"
		if err != nil {
			r.fail("reproducer %s: %v", tg.Name, err)
			check = "FAILED: " + err.Error()
		}
		r.vals["s7/repro/"+tg.Name] = res.BindsPerSec()
		r.progress("  %s: %s bind(0)", tg.Name, fmtRate(res.BindsPerSec()))
		t.add(tg.Name, fmtRate(res.BindsPerSec()), fmtInt(int(res.Fails)), fmtInt(int(res.Closes)), fmt.Sprint(res.Free), check)
		runtime.GC()
	}
	r.printf("%s\n", t)
}
