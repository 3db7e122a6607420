package main

import (
	"fmt"
	"math"
	"slices"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// lookupSlots is the table size of udpdemux in the lookup scenarios of
// the original design: the largest that Linux allows (uhash_entries), as
// in the 2009 threads.
const lookupSlots = 65536

func samePortSizes(quick bool) []int {
	if quick {
		return []int{256, 4096}
	}
	return []int{256, 512, 4096, 65536}
}

func (r *runner) samePort() {
	r.printf("n sockets on port %d at distinct IPv4 addresses (10.0.0.1, …) plus one on 0.0.0.0, all with SO_REUSEADDR; "+
		"udpdemux with %s slots. *bound*: datagrams to the bound addresses; *wildcard*: datagrams to addresses "+
		"that only the 0.0.0.0 socket serves.\n\n", suite.SamePortPort, fmtInt(lookupSlots))
	t := newTable(lookupHeader("sockets, datagrams to", suite.Targets, suite.Hybrid)...)
	var all []*result
	sets := []string{suite.SetBound, suite.SetWildcard}
	for _, n := range samePortSizes(r.c.quick) {
		sh := suite.SamePort(n, lookupSlots, r.c.seed)
		res := r.lookups(sh, sets, suite.Targets, suite.Options{}, nil)
		all = append(all, res)
		r.record(key{scen: scSamePort, n: n}, res)
		for _, set := range sets {
			t.add(lookupRow(fmt.Sprintf("%s, %s", fmtInt(n), set), suite.Targets, suite.Hybrid, func(tg string) meas { return res.get(set, tg) })...)
		}
	}
	r.printf("%s\n%s\n\n", t, lookupColumns(suite.Targets, suite.Hybrid))
	r.allocNote(all...)
}

func (r *runner) distinctPorts() {
	n := distinctPortsSize.at(r.c.quick)
	r.printf("%s sockets on 0.0.0.0 at distinct ports, udpdemux with %s slots (one port per primary slot); "+
		"datagrams to 10.0.0.1 at the bound ports. Two-phase pays a probe of the exact-address secondary slot "+
		"before the wildcard one.\n\n", fmtInt(n), fmtInt(lookupSlots))
	sh := suite.DistinctPorts(n, lookupSlots, r.c.seed)
	res := r.lookups(sh, []string{suite.SetBound}, suite.Targets, suite.Options{}, nil)
	r.record(key{scen: scDistinctPorts, n: n}, res)
	t := newTable(lookupHeader("sockets", suite.Targets, suite.Hybrid)...)
	t.add(lookupRow(fmtInt(n), suite.Targets, suite.Hybrid, func(tg string) meas { return res.get(suite.SetBound, tg) })...)
	r.printf("%s\n%s\n\n", t, lookupColumns(suite.Targets, suite.Hybrid))
	r.allocNote(res)
}

// shapeGoals judges the goals of the same-port and distinct-ports shapes.
func (r *runner) shapeGoals() []goal {
	type at struct {
		label string
		k     key
	}
	var ats []at
	for _, n := range samePortSizes(r.c.quick) {
		for _, set := range []string{suite.SetBound, suite.SetWildcard} {
			ats = append(ats, at{fmt.Sprintf("same port, %s sockets, %s", fmtInt(n), set), key{scen: scSamePort, n: n, set: set, m: lookupNs}})
		}
	}
	n := distinctPortsSize.at(r.c.quick)
	ats = append(ats, at{fmt.Sprintf("distinct ports, %s sockets", fmtInt(n)), key{scen: scDistinctPorts, n: n, set: suite.SetBound, m: lookupNs}})
	of := func(k key, t suite.Target) float64 { k.target = t.Name; return r.val(k) }
	var floor, gv []place
	for _, a := range ats {
		h := of(a.k, suite.Hybrid)
		floor = append(floor, place{a.label, h / of(a.k, suite.Floor)})
		gv = append(gv, place{a.label, of(a.k, suite.GVisor) / h})
	}
	gs := []goal{
		limit("Hybrid within 3× of the map floor, same port and distinct ports (every size and set)", floor, true, 3, fmtX),
		limit("Hybrid at least 5× faster than gVisor, same port and distinct ports (every size and set)", gv, false, 5, fmtFaster),
	}
	dk := ats[len(ats)-1].k
	gs = append(gs, limit("Two-phase slower than one-phase with one socket per port",
		[]place{{"two-phase ÷ one-phase, " + ats[len(ats)-1].label, of(dk, suite.TwoPhase) / of(dk, suite.OnePhase)}}, false, 1,
		func(x float64) string { return fmtX(x) }))
	sk := key{scen: scSamePort, n: 4096, set: suite.SetBound, m: lookupNs}
	gs = append(gs, limit("One-phase at least 100× slower than two-phase at 4096 sockets on one port",
		[]place{{"one-phase ÷ two-phase", of(sk, suite.OnePhase) / of(sk, suite.TwoPhase)}}, false, 100,
		func(x float64) string { return fmtX(x) + " slower" }))
	return gs
}

// sweepKs returns the sweep's total and sockets per port.
func sweepKs(quick bool) (int, []int) {
	if quick {
		return 4096, []int{1, 2, 4, 8, 11, 16, 64, 512}
	}
	return 32768, []int{1, 2, 4, 8, 10, 11, 12, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
}

func (r *runner) sweep() {
	total, ks := sweepKs(r.c.quick)
	r.printf("%s sockets in all, k on each port at distinct IPv4 addresses (so %s/k ports); udpdemux with %s slots; "+
		"datagrams to the bound sockets. The hybrid rule (threshold %d) searches the secondary table when a port's "+
		"primary slot holds more than %d sockets.\n\n", fmtInt(total), fmtInt(total), fmtInt(lookupSlots), 10, 10)
	head := append(lookupHeader("k per port", suite.Targets, suite.Hybrid), "hybrid vs best strategy")
	t := newTable(head...)
	ser := map[string]*series{}
	for _, tg := range suite.Targets {
		ser[tg.Name] = &series{name: tg.Name}
	}
	var all []*result
	var cross []int // the k where two-phase is faster than one-phase
	for _, k := range ks {
		sh := suite.PerPort(total, k, lookupSlots, r.c.seed)
		res := r.lookups(sh, []string{suite.SetBound}, suite.Targets, suite.Options{}, nil)
		all = append(all, res)
		r.record(key{scen: scSweep, n: k}, res)
		get := func(tg string) meas { return res.get(suite.SetBound, tg) }
		row := lookupRow(fmt.Sprintf("%d (%s ports)", k, fmtInt(max(total/k, 1))), suite.Targets, suite.Hybrid, get)
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
	r.printf("%s\n%s *hybrid vs best strategy*: hybrid's time divided by the faster of one-phase and two-phase "+
		"at that k; 1.00× means hybrid chose the faster path, above 1.00× it pays for its choice.\n\n",
		t, lookupColumns(suite.Targets, suite.Hybrid))
	r.allocNote(all...)
	r.crossover(ks, cross)
	var ss []series
	for _, tg := range suite.Targets {
		ss = append(ss, *ser[tg.Name])
	}
	r.plot("lookup-per-port.svg", fmt.Sprintf("Lookup time vs sockets per port (%s sockets)", fmtInt(total)),
		"sockets per port", ss, sizeTicks(ks))
}

// crossover reports from which k two-phase stays faster than one-phase,
// and what that says about the hybrid threshold.
func (r *runner) crossover(ks, cross []int) {
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
		return
	case cx == ks[0]:
		r.printf("**Crossover:** two-phase was faster than one-phase at every k measured, down to %d.\n\n", cx)
		return
	}
	prev := ks[slices.Index(ks, cx)-1]
	r.set(key{scen: scSweep, m: crossoverK}, float64(cx))
	// The hybrid rule with threshold T switches at k = T+1, so the
	// thresholds that match are prev … cx-1.
	lo, hi := prev, cx-1
	best := fmt.Sprintf("between %d and %d", lo, hi)
	if lo == hi {
		best = fmt.Sprint(lo)
	}
	r.printf("**Crossover:** two-phase is faster than one-phase from k = %d sockets per port on "+
		"(and slower at k = %d). The hybrid rule with threshold T switches to the secondary table at k = T+1, "+
		"so the threshold that matches this machine is %s. ", cx, prev, best)
	switch {
	case lo <= 10 && 10 <= hi:
		r.printf("The default of 10 is one of them: keep it.\n\n")
	case 10 >= lo/2 && 10 <= 2*hi:
		r.printf("The default of 10 is within a factor of two; around the crossover the two strategies " +
			"differ little (see the table), so changing it buys little.\n\n")
	default:
		r.printf("The default of 10 is far from it: consider a threshold of %d on machines like this one.\n\n", hi)
	}
}

func (r *runner) mixed() {
	n := mixedSize.at(r.c.quick)
	r.printf("A DNS forwarder: 16 service sockets on 10.0.0.1…16 port 53 (SO_REUSEADDR), 8 sockets on 10.0.0.1…8 "+
		"port 53 connected to one client each, and %s client sockets on 0.0.0.0 at distinct random ports of "+
		"10000–65535 connected to one of 4 upstream resolvers (their source address becomes one of 10.0.0.1…16). "+
		"*queries*: clients to the service; *replies*: upstreams to the client sockets; *peers*: the 8 connected "+
		"clients; *mix*: 50 %% queries, 45 %% replies, 5 %% peers. The map floor is keyed by the 4-tuple here. "+
		"udpdemux with %s slots.\n\n", fmtInt(n), fmtInt(lookupSlots))
	sh := suite.Mixed(n, lookupSlots, r.c.seed)
	sets := []string{suite.SetQueries, suite.SetReplies, suite.SetPeers, suite.SetMix}
	res := r.lookups(sh, sets, suite.Targets, suite.Options{}, nil)
	r.record(key{scen: scMixed, n: n}, res)
	t := newTable(lookupHeader("datagrams", suite.Targets, suite.Hybrid)...)
	for _, s := range sets {
		t.add(lookupRow(s, suite.Targets, suite.Hybrid, func(tg string) meas { return res.get(s, tg) })...)
	}
	r.printf("%s\n%s\n\n", t, lookupColumns(suite.Targets, suite.Hybrid))
	r.allocNote(res)
}
