package main

import (
	"fmt"
	"runtime"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// The shapes of the default-Config scale scenario.
const shMixed = "mixed"

func scaleDefaultSizes(quick bool) []int {
	if quick {
		return []int{1000, 10000}
	}
	return []int{1000, 10000, 100000, 1000000}
}

// scaleDefaultSets returns the sets measured on a shape.
func scaleDefaultSets(shape string) []string {
	if shape == shMixed {
		return []string{suite.SetQueries, suite.SetReplies, suite.SetPeers, suite.SetMix}
	}
	return []string{suite.SetBound, suite.SetWildcard}
}

func (r *runner) scaleDefault() {
	sizes := scaleDefaultSizes(r.c.quick)
	top := sizes[len(sizes)-1]
	r.printf("udpdemux as `demux.Config{}` makes it, with no sizing, against gVisor and the map floor, on the same-port "+
		"shape (n sockets on one port at distinct addresses plus one on 0.0.0.0) and the mixed shape (the DNS "+
		"forwarder, with n client sockets; past 55 536 clients they share ports with SO_REUSEADDR), from %s to %s "+
		"sockets. *Heap* is the growth of the live heap after a garbage collection (`runtime.ReadMemStats`), divided "+
		"by the sockets, the tables included.\n\n", fmtInt(sizes[0]), fmtInt(top))
	look := newTable(lookupHeader("shape, sockets, datagrams", flatTargets, suite.Default)...)
	costHead := []string{"shape, sockets"}
	for _, tg := range flatTargets {
		costHead = append(costHead, tg.Name)
	}
	heap := newTable(costHead...)
	churn := newTable("contender", "bind", "close")
	var all []*result
	ser := map[string]*series{}
	for _, tg := range flatTargets {
		ser[tg.Name] = &series{name: tg.Name}
	}
	for _, shape := range []string{shSamePort, shMixed} {
		for _, n := range sizes {
			var sh *suite.Shape
			if shape == shSamePort {
				sh = suite.SamePort(n, 0, r.c.seed)
			} else {
				sh = suite.Mixed(n, 0, r.c.seed)
			}
			sets := scaleDefaultSets(shape)
			res := r.lookupsThen(sh, sets, flatTargets, suite.Options{Memory: true, Budget: r.buildBudget()}, nil, func(tg suite.Target, f suite.Fixture) {
				if shape != shSamePort || n != top {
					return
				}
				b, c := r.churn(fmt.Sprintf("%s churn %s", sh.Name, tg.Name), f, sh.Churn[:churnCount.at(r.c.quick)],
					key{scen: scScaleDefault, shape: shape, n: n, target: tg.Name})
				churn.add(tg.Name, fmtNs(b), fmtNs(c))
			})
			all = append(all, res)
			r.record(key{scen: scScaleDefault, shape: shape, n: n}, res)
			for _, set := range sets {
				look.add(lookupRow(fmt.Sprintf("%s, %s, %s", shape, fmtInt(n), set), flatTargets, suite.Default,
					func(tg string) meas { return res.get(set, tg) })...)
			}
			hrow := []string{fmt.Sprintf("%s, %s", shape, fmtInt(n))}
			for _, tg := range flatTargets {
				c, ok := res.cost[tg.Name]
				if !ok {
					hrow = append(hrow, "—")
					continue
				}
				_, by := c.PerSocket(len(sh.Socks))
				r.set(key{scen: scScaleDefault, shape: shape, n: n, target: tg.Name, m: heapBytes}, by)
				hrow = append(hrow, fmt.Sprintf("%.0f B", by))
			}
			heap.add(hrow...)
			if shape == shSamePort {
				for _, tg := range flatTargets {
					if m := res.get(suite.SetBound, tg.Name); m.ok {
						ser[tg.Name].add(float64(n), m.ns)
					}
				}
			}
			runtime.GC()
		}
	}
	r.printf("Lookup:\n\n%s\n%s\n\n", look, lookupColumns(flatTargets, suite.Default))
	r.printf("Writes at %s sockets on one port: per socket, %s of binding %d more sockets on "+
		"that port (gVisor: registering them; the floor: map inserts), then closing them (lower is better):\n\n%s\n",
		fmtInt(top), rounds(r.c.runs), churnCount.at(r.c.quick), churn)
	r.printf("Heap per socket (lower is better):\n\n%s\n", heap)
	r.smallTable()
	r.shrunkTable(top)
	r.allocNote(all...)
	var ss []series
	for _, tg := range flatTargets {
		ss = append(ss, *ser[tg.Name])
	}
	r.plot("scale-default-same-port.svg", "Lookup time vs sockets on one port, default Config", "sockets", ss, sizeTicks(sizes))
}

// smallSockets is the size of the small table whose whole heap is
// measured.
const smallSockets = 16

// smallTable measures the heap of a table holding 16 sockets, with the
// default Config and with the original design's 4 096 slots.
func (r *runner) smallTable() {
	sh := suite.SamePort(smallSockets-1, 0, r.c.seed) // plus the 0.0.0.0 socket
	t := newTable("contender", fmt.Sprintf("heap of a table of %d sockets", smallSockets))
	for _, tg := range []suite.Target{suite.Default, suite.Fixed4096, suite.GVisor, suite.Floor} {
		f, c, err := suite.Prepare(tg, sh, suite.Options{Memory: true})
		if err != nil {
			r.fail("%v", err)
			continue
		}
		f.Close()
		r.set(key{scen: scScaleDefault, shape: shSamePort, n: smallSockets, target: tg.Name, m: heapBytes}, float64(c.Heap))
		t.add(tg.Name, fmtBytes(float64(c.Heap)))
	}
	r.printf("A small table: the whole growth of the live heap for %d sockets on one port (lower is better):\n\n%s\n", smallSockets, t)
}

// shrunkKeep is how many sockets the shrunk table keeps.
func shrunkKeep(top int) int { return min(1000, top/10) }

// shShrunk names the figures of the shrunk table.
const shShrunk = "shrunk"

// shrunkTable measures the heap that a default table keeps after it grew
// to top sockets on one port and closed all but shrunkKeep of them,
// against a table that only ever held those.
func (r *runner) shrunkTable(top int) {
	keep := shrunkKeep(top)
	shrunk, small, err := suite.ShrinkHeap(top, keep, r.c.seed)
	if err != nil {
		r.fail("shrunk table: %v", err)
		return
	}
	r.set(key{scen: scScaleDefault, shape: shShrunk, n: top, target: suite.Default.Name, m: heapBytes}, float64(shrunk))
	r.set(key{scen: scScaleDefault, shape: shShrunk, n: keep, target: suite.Default.Name, m: heapBytes}, float64(small))
	t := newTable("table", "heap")
	t.add(fmt.Sprintf("grew to %s sockets on one port, then closed all but %s", fmtInt(top), fmtInt(keep)), fmtBytes(float64(shrunk)))
	t.add(fmt.Sprintf("only ever held %s", fmtInt(keep)), fmtBytes(float64(small)))
	r.printf("A table that shrank: the growth of the live heap of each table, both alive (lower is better):\n\n%s\n", t)
}

func (r *runner) scaleDefaultGoals() []goal {
	sizes := scaleDefaultSizes(r.c.quick)
	top := sizes[len(sizes)-1]
	var floor []place
	for _, shape := range []string{shSamePort, shMixed} {
		for _, n := range sizes {
			for _, set := range scaleDefaultSets(shape) {
				k := key{scen: scScaleDefault, shape: shape, n: n, set: set, m: lookupNs}
				of := func(t suite.Target) float64 { k.target = t.Name; return r.val(k) }
				floor = append(floor, place{fmt.Sprintf("%s, %s, %s", shape, fmtInt(n), set), of(suite.Default) / of(suite.Floor)})
			}
		}
	}
	k := key{scen: scScaleDefault, shape: shSamePort, n: top, target: suite.Default.Name}
	kb, kc := k, k
	kb.m, kc.m = bindNs, closeNs
	var heaps []place
	for _, shape := range []string{shSamePort, shMixed} {
		heaps = append(heaps, place{shape, r.val(key{scen: scScaleDefault, shape: shape, n: top, target: suite.Default.Name, m: heapBytes})})
	}
	small := r.val(key{scen: scScaleDefault, shape: shSamePort, n: smallSockets, target: suite.Default.Name, m: heapBytes})
	keep := shrunkKeep(top)
	shrunk := r.val(key{scen: scScaleDefault, shape: shShrunk, n: top, target: suite.Default.Name, m: heapBytes})
	kept := r.val(key{scen: scScaleDefault, shape: shShrunk, n: keep, target: suite.Default.Name, m: heapBytes})
	span := fmt.Sprintf("%s to %s sockets", fmtInt(sizes[0]), fmtInt(top))
	return []goal{
		limit("Default Config: lookup ≤ 2.5× the map floor, same-port and mixed shapes, "+span, floor, true, 2.5, fmtX),
		limit(fmt.Sprintf("Default Config: bind of the next socket at %s sockets on one port ≤ 3 µs", fmtInt(top)), []place{{"", r.val(kb)}}, true, 3000, fmtNs),
		limit(fmt.Sprintf("Default Config: close at %s sockets on one port ≤ 1 µs", fmtInt(top)), []place{{"", r.val(kc)}}, true, 1000, fmtNs),
		limit(fmt.Sprintf("Default Config: ≤ 256 B of heap per socket at %s sockets, tables included", fmtInt(top)), heaps, true, 256,
			func(b float64) string { return fmt.Sprintf("%.0f B", b) }),
		limit(fmt.Sprintf("Default Config: a table of %d sockets takes ≤ 16 KiB in all", smallSockets), []place{{"", small}}, true, 16*1024, fmtBytes),
		limit(fmt.Sprintf("Default Config: after growing to %s sockets on one port and closing all but %s, the heap is ≤ 2× a table that only ever held %s",
			fmtInt(top), fmtInt(keep), fmtInt(keep)), []place{{"", shrunk / kept}}, true, 2, fmtX),
	}
}
