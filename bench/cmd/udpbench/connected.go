package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// flatTargets are the contenders of the growing-table scenarios: udpdemux
// as demux.Config{} makes it, gVisor and the map floor.
var flatTargets = []suite.Target{suite.Default, suite.GVisor, suite.Floor}

func connectedSizes(quick bool) []int {
	if quick {
		return []int{100, 1000}
	}
	return []int{1000, 10000, 100000}
}

// churn times binding (and connecting) socks into f and closing them, a
// median of c.runs, and records the per-socket times under k with the
// metrics bindNs and closeNs.
func (r *runner) churn(label string, f suite.Fixture, socks []suite.Sock, k key) (bind, close float64) {
	c, ok := f.(suite.Churner)
	if !ok {
		return math.NaN(), math.NaN()
	}
	var bs, cs []float64
	for range r.c.runs {
		b, cl, err := c.Churn(socks)
		if err != nil {
			r.fail("%s: %v", label, err)
			return math.NaN(), math.NaN()
		}
		bs = append(bs, float64(b.Nanoseconds())/float64(len(socks)))
		cs = append(cs, float64(cl.Nanoseconds())/float64(len(socks)))
	}
	bind, close = median(bs), median(cs)
	k.m = bindNs
	r.set(k, bind)
	k.m = closeNs
	r.set(k, close)
	r.detail("  %-52s bind %s, close %s", label, fmtNs(bind), fmtNs(close))
	return bind, close
}

func (r *runner) connected() {
	sizes := connectedSizes(r.c.quick)
	r.printf("A listener on 10.0.0.1:%d and n sockets on the same address and port, each bound with SO_REUSEADDR and "+
		"connected to a peer of its own (172.16.0.0/12, port 40000), as QUIC and DNS servers do. *known*: datagrams "+
		"from the peers; *unknown*: from other sources, which the listener receives. udpdemux with the default "+
		"`demux.Config{}`; gVisor with each connected endpoint registered under its full 4-tuple, as its UDP connect "+
		"does; the map floor keyed by the 4-tuple.\n\n", suite.ConnectedPort)
	t := newTable(lookupHeader("sockets, datagrams from", flatTargets, suite.Default)...)
	churn := newTable("contender", "bind + connect", "close")
	var all []*result
	sets := []string{suite.SetKnown, suite.SetUnknown}
	for _, n := range sizes {
		sh := suite.Connected(n, r.c.seed)
		last := n == sizes[len(sizes)-1]
		res := r.lookupsThen(sh, sets, flatTargets, suite.Options{Budget: r.buildBudget()}, nil, func(tg suite.Target, f suite.Fixture) {
			if !last {
				return
			}
			b, c := r.churn(fmt.Sprintf("%s churn %s", sh.Name, tg.Name), f, sh.Churn[:churnCount.at(r.c.quick)],
				key{scen: scConnected, n: n, target: tg.Name})
			churn.add(tg.Name, fmtNs(b), fmtNs(c))
		})
		all = append(all, res)
		r.record(key{scen: scConnected, n: n}, res)
		for _, set := range sets {
			t.add(lookupRow(fmt.Sprintf("%s, %s", fmtInt(n), set), flatTargets, suite.Default, func(tg string) meas { return res.get(set, tg) })...)
		}
	}
	r.printf("Lookup:\n\n%s\n%s\n\n", t, lookupColumns(flatTargets, suite.Default))
	r.gvisorNearFloor(all, sizes, sets)
	r.printf("Writes at %s connected sockets: per socket, %s of binding and connecting %d more "+
		"sockets (gVisor: registering their 4-tuples; the floor: map inserts), then closing them (lower is better):\n\n%s\n",
		fmtInt(sizes[len(sizes)-1]), rounds(r.c.runs), churnCount.at(r.c.quick), churn)
	r.allocNote(all...)
}

// gvisorNearFloor says in which rows gVisor's lookup took less than 5× the
// map floor's: there no table can be 5× faster than gVisor without beating
// the floor, which knows the answer's key in advance.
func (r *runner) gvisorNearFloor(all []*result, sizes []int, sets []string) {
	var near []string
	for i, n := range sizes {
		for _, set := range sets {
			g, f := all[i].get(set, suite.GVisor.Name), all[i].get(set, suite.Floor.Name)
			if g.ok && f.ok && g.ns < 5*f.ns {
				near = append(near, fmt.Sprintf("%s, %s (%s)", fmtInt(n), set, fmtX(g.ns/f.ns)))
			}
		}
	}
	if len(near) > 0 {
		r.printf("gVisor took less than 5× the map floor's time in these rows: %s. There, a table 5× faster than "+
			"gVisor would have to beat the floor, which knows the answer's key in advance.\n\n", strings.Join(near, "; "))
	}
}

func (r *runner) connectedGoals() []goal {
	sizes := connectedSizes(r.c.quick)
	var floor, gv []place
	for _, n := range sizes {
		for _, set := range []string{suite.SetKnown, suite.SetUnknown} {
			k := key{scen: scConnected, n: n, set: set, m: lookupNs}
			of := func(t suite.Target) float64 { k.target = t.Name; return r.val(k) }
			label := fmt.Sprintf("%s sockets, %s", fmtInt(n), set)
			floor = append(floor, place{label, of(suite.Default) / of(suite.Floor)})
			gv = append(gv, place{label, of(suite.GVisor) / of(suite.Default)})
		}
	}
	n := sizes[len(sizes)-1]
	k := key{scen: scConnected, n: n, target: suite.Default.Name}
	kb, kc := k, k
	kb.m, kc.m = bindNs, closeNs
	span := fmt.Sprintf("%s to %s connected sockets", fmtInt(sizes[0]), fmtInt(n))
	return []goal{
		limit("Connected: lookup ≤ 2.5× the map floor, "+span, floor, true, 2.5, fmtX),
		limit("Connected: lookup at least 5× faster than gVisor, "+span, gv, false, 5, fmtFaster),
		limit(fmt.Sprintf("Connected: bind + connect of the next socket ≤ 3 µs at %s", fmtInt(n)),
			[]place{{"", r.val(kb)}}, true, 3000, fmtNs),
		limit(fmt.Sprintf("Connected: close ≤ 3 µs at %s", fmtInt(n)), []place{{"", r.val(kc)}}, true, 3000, fmtNs),
	}
}

func (r *runner) group() {
	n := groupSize.at(r.c.quick)
	r.printf("%s sockets in one SO_REUSEPORT group on 10.0.0.1:%d; datagrams from random sources, which any member may "+
		"receive (each contender spreads flows with a hash of its own; the check accepts any member). udpdemux with the "+
		"default `demux.Config{}`; gVisor with `LoadBalanced` endpoints. The map floor here is one probe of a Go map from "+
		"the group's address and port to its members, and a member picked by a multiplicative hash of the source.\n\n",
		fmtInt(n), suite.SamePortPort)
	sh := suite.ReusePortGroup(n, r.c.seed)
	res := r.lookups(sh, []string{suite.SetFlows}, flatTargets, suite.Options{Budget: r.buildBudget()}, nil)
	r.record(key{scen: scGroup, n: n}, res)
	t := newTable(lookupHeader("members", flatTargets, suite.Default)...)
	t.add(lookupRow(fmtInt(n), flatTargets, suite.Default, func(tg string) meas { return res.get(suite.SetFlows, tg) })...)
	r.printf("%s\n%s\n\n", t, lookupColumns(flatTargets, suite.Default))
	r.allocNote(res)
}

func (r *runner) groupGoals() []goal {
	n := groupSize.at(r.c.quick)
	k := key{scen: scGroup, n: n, set: suite.SetFlows, m: lookupNs}
	of := func(t suite.Target) float64 { k.target = t.Name; return r.val(k) }
	return []goal{limit(fmt.Sprintf("SO_REUSEPORT group of %s members: lookup ≤ 2.5× the map floor", fmtInt(n)),
		[]place{{"", of(suite.Default) / of(suite.Floor)}}, true, 2.5, fmtX)}
}

// demuxTargets are the names of udpdemux's contenders, for the goals that
// hold for every one of them.
var demuxTargets = []string{suite.OnePhase.Name, suite.TwoPhase.Name, suite.Hybrid.Name, suite.Default.Name, suite.Fixed4096.Name}

func isDemux(name string) bool { return slices.Contains(demuxTargets, name) }
