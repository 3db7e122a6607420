package main

import (
	"fmt"
	"math"
	"runtime"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// The shapes of the scale scenarios.
const (
	shSamePort      = "same-port"
	shDistinctPorts = "distinct-ports"
)

// shapeAt is a shape of a scenario: its family and size.
type shapeAt struct {
	shape string // shSamePort or shDistinctPorts
	n     int
}

// make builds the shape with udpdemux's tables of the given slots.
func (s shapeAt) make(slots int, seed uint64) *suite.Shape {
	if s.shape == shSamePort {
		return suite.SamePort(s.n, slots, seed)
	}
	return suite.DistinctPorts(s.n, slots, seed)
}

// scaleSizes returns the sizes of each shape of the scale scenario.
func scaleSizes(quick bool, shape string) []int {
	switch {
	case quick:
		return []int{1000, 10000}
	case shape == shDistinctPorts:
		return []int{1000, 10000, 65000}
	}
	return []int{1000, 10000, 100000, 1000000}
}

func (r *runner) scale() {
	const onePhaseMax = 65536
	r.printf("The same-port shape (one port, distinct addresses, plus the 0.0.0.0 socket) and the distinct-ports "+
		"shape (0.0.0.0 at distinct ports; at most 65 000 since there are 65 535 ports) from 1 000 sockets up; "+
		"udpdemux with %s slots. One-phase is not run above %s sockets on one port: every bind and lookup scans "+
		"the whole chain, so building the table is quadratic. The bind cost and heap are measured with each table "+
		"alone; then every size of a shape is built in every contender and their lookups are timed in the same "+
		"rounds, since the spread below compares the sizes.\n\n", fmtInt(lookupSlots), fmtInt(onePhaseMax))
	look := newTable(lookupHeader("shape, sockets", suite.Targets, suite.Hybrid)...)
	costHead := []string{"shape, sockets"}
	for _, tg := range suite.Targets {
		costHead = append(costHead, tg.Name)
	}
	bind, heap := newTable(costHead...), newTable(costHead...)
	var all []*result
	shapes := []string{shSamePort, shDistinctPorts}
	plots := map[string]map[string]*series{}
	for _, shape := range shapes {
		plots[shape] = map[string]*series{}
		for _, tg := range suite.Targets {
			plots[shape][tg.Name] = &series{name: tg.Name}
		}
		// The sizes of a shape are timed in the same rounds: the spread
		// below compares them.
		sizes := scaleSizes(r.c.quick, shape)
		var shs []*suite.Shape
		sizeOf := map[*suite.Shape]int{}
		for _, n := range sizes {
			sh := shapeAt{shape, n}.make(lookupSlots, r.c.seed)
			shs, sizeOf[sh] = append(shs, sh), n
		}
		skip := func(sh *suite.Shape, t suite.Target) bool {
			return t == suite.OnePhase && shape == shSamePort && sizeOf[sh] > onePhaseMax
		}
		ress := r.lookupsAcross(shs, []string{suite.SetBound}, suite.Targets, suite.Options{Memory: true, Reserve: true}, skip, nil, nil)
		for i, n := range sizes {
			s, res := shs[i], ress[i]
			all = append(all, res)
			r.record(key{scen: scScale, shape: shape, n: n}, res)
			label := fmt.Sprintf("%s, %s", shape, fmtInt(n))
			look.add(lookupRow(label, suite.Targets, suite.Hybrid, func(tg string) meas { return res.get(suite.SetBound, tg) })...)
			brow, hrow := []string{label}, []string{label}
			for _, tg := range suite.Targets {
				c, ok := res.cost[tg.Name]
				if !ok {
					brow, hrow = append(brow, "—"), append(hrow, "—")
					continue
				}
				ns, by := c.PerSocket(len(s.Socks))
				brow = append(brow, fmtNs(ns))
				hrow = append(hrow, fmt.Sprintf("%.0f B", by))
				if m := res.get(suite.SetBound, tg.Name); m.ok {
					plots[shape][tg.Name].add(float64(n), m.ns)
				}
			}
			bind.add(brow...)
			heap.add(hrow...)
			runtime.GC()
		}
	}
	r.printf("Lookup:\n\n%s\n%s\n\n", look, lookupColumns(suite.Targets, suite.Hybrid))
	r.printf("Bind, per socket, while building the table (for gVisor, `ReservePort` then `RegisterTransportEndpoint`, "+
		"as its UDP bind does; for the map floor, a map insert):\n\n%s\n", bind)
	r.printf("Heap per socket: the growth of the live heap after a garbage collection, divided by the sockets "+
		"(the fixed cost of the %s-slot tables included):\n\n%s\n", fmtInt(lookupSlots), heap)
	r.allocNote(all...)
	for _, shape := range shapes {
		sizes := scaleSizes(r.c.quick, shape)
		for _, tg := range []suite.Target{suite.Hybrid, suite.Floor} {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, n := range sizes {
				v := r.val(key{scen: scScale, shape: shape, n: n, set: suite.SetBound, target: tg.Name, m: lookupNs})
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
			// NaN propagates: one missing size leaves the spread unmeasured.
			r.set(key{scen: scScale, shape: shape, target: tg.Name, m: spreadX}, hi/lo)
			r.printf("- %s, %s: slowest ÷ fastest lookup from %s to %s sockets = %s\n", shape, tg.Name,
				fmtInt(sizes[0]), fmtInt(sizes[len(sizes)-1]), fmtX(hi/lo))
		}
	}
	r.printf("\nThe floor's spread is what the memory hierarchy alone does to one random probe as the table grows past the caches.\n\n")
	for _, shape := range shapes {
		var ss []series
		for _, tg := range suite.Targets {
			ss = append(ss, *plots[shape][tg.Name])
		}
		r.plot("scale-"+shape+".svg", fmt.Sprintf("Lookup time vs sockets, %s shape, %s slots", shape, fmtInt(lookupSlots)),
			"sockets", ss, sizeTicks(scaleSizes(r.c.quick, shape)))
	}
}

func (r *runner) scaleGoals() []goal {
	var gs []goal
	for _, shape := range []string{shSamePort, shDistinctPorts} {
		sizes := scaleSizes(r.c.quick, shape)
		s := r.val(key{scen: scScale, shape: shape, target: suite.Hybrid.Name, m: spreadX})
		f := r.val(key{scen: scScale, shape: shape, target: suite.Floor.Name, m: spreadX})
		gs = append(gs, limit(fmt.Sprintf("Hybrid lookup flat (slowest within 1.5× of fastest), %s shape, %s to %s sockets, fixed %s slots",
			shape, fmtInt(sizes[0]), fmtInt(sizes[len(sizes)-1]), fmtInt(lookupSlots)),
			[]place{{"map floor " + fmtX(f), s}}, true, 1.5, fmtX))
	}
	return gs
}
