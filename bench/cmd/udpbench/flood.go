package main

import (
	"fmt"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// floodTargets are the configurations the flood shapes are run against:
// the default one, whose indexes the goals judge. The fixed slots are
// Linux's design, whose bind checks scan a slot's chain as Linux does;
// the aliasing scenario measures them under attack.
var floodTargets = []suite.Target{suite.Default}

// Goals of the flood scenario, for every shape.
const (
	floodLookupMax = 2    // the victim's lookup with attackers ÷ without
	floodBindMax   = 3000 // ns for the next bind beside the attackers
)

func (r *runner) flood() {
	n := floodAttackers.at(r.c.quick)
	r.printf("A victim socket and %s sockets that a local tenant, or a host with many VRFs, tunnels or per-tenant "+
		"interfaces, binds beside it (all with SO_REUSEADDR), in five shapes: *%s*, wildcard sockets on the victim's "+
		"port %d each bound to a device of its own, beside a victim bound to 0.0.0.0 and no device; *%s*, wildcard "+
		"sockets on port %d beside a wildcard victim on %d; *%s*, sockets on the victim's /64 and port; *%s*, on IPv6 "+
		"addresses that differ from the victim's only in their high 64 bits; *%s*, on the victim's address (10.0.0.1) "+
		"at port %d, each bound to a device of its own. Datagrams from random sources to the victim arrive on "+
		"interface 1, which no attacker is bound to. The baseline is the same lookups in a table that holds the "+
		"victim alone, timed in the same rounds. *next bind*: binding %d more attackers, per socket, then closing "+
		"them (a median of %d).\n\n",
		fmtInt(n), suite.FloodDevices, suite.VictimPort, suite.FloodAliasedWild, suite.AliasPort, suite.VictimPort,
		suite.FloodIPv6Net, suite.FloodHighHalf, suite.FloodAliasedDevices, suite.AliasPort, churnCount.at(r.c.quick), r.c.runs)
	t := newTable("configuration, shape", "without attackers", "with attackers", "with ÷ without",
		"next bind, without", "next bind, with", "close, with")
	o := suite.Options{Budget: r.buildBudget()}
	for _, tg := range floodTargets {
		for _, kind := range suite.FloodKinds {
			var shs []*suite.Shape
			for _, m := range []int{n, 0} {
				sh, err := suite.Flood(kind, m, r.c.seed)
				if err != nil {
					r.fail("flood %s: %v", kind, err)
					return
				}
				shs = append(shs, sh)
			}
			// lookupsAcross builds each shape alone first, in the order
			// of shs, and hands each build to after: the next bind is
			// timed there, at the shape's size.
			built := 0
			ress := r.lookupsAcross(shs, []string{suite.SetVictim}, []suite.Target{tg}, o, nil, nil,
				func(tg suite.Target, f suite.Fixture) {
					sh := shs[built]
					built++
					m := len(sh.Socks) - 1
					r.churn(fmt.Sprintf("%s churn %s", sh.Name, tg.Name), f, sh.Churn[:churnCount.at(r.c.quick)],
						key{scen: scFlood, shape: kind, n: m, target: tg.Name})
				})
			r.record(key{scen: scFlood, shape: kind, n: n}, ress[0])
			r.record(key{scen: scFlood, shape: kind, n: 0}, ress[1])
			a, b := ress[0].get(suite.SetVictim, tg.Name), ress[1].get(suite.SetVictim, tg.Name)
			k := key{scen: scFlood, shape: kind, target: tg.Name, m: bindNs}
			kn, k0 := k, k
			kn.n, k0.n = n, 0
			kc := kn
			kc.m = closeNs
			t.add(fmt.Sprintf("%s, %s", tg.Name, kind), fmtNs(b.ns), fmtNs(a.ns), fmtX(a.ns/b.ns),
				fmtNs(r.val(k0)), fmtNs(r.val(kn)), fmtNs(r.val(kc)))
		}
	}
	r.printf("%s\nColumns: time per lookup for the victim, and per socket bound or closed beside the attackers (lower is "+
		"better); *with ÷ without*: how many times slower the attackers make the victim's lookup.\n\n", t)
}

// floodGoals judges the goals set for the device flood, and the
// same bounds on the other shapes, apart, so that RESULTS.md says which
// of them are still not flat.
func (r *runner) floodGoals() []goal {
	n := floodAttackers.at(r.c.quick)
	var gs []goal
	for _, tg := range floodTargets {
		for _, kinds := range [][]string{suite.FloodKinds[:1], suite.FloodKinds[1:]} {
			var lookups, binds []place
			for _, kind := range kinds {
				k := key{scen: scFlood, shape: kind, n: n, set: suite.SetVictim, target: tg.Name, m: lookupNs}
				with := r.val(k)
				k.n = 0
				lookups = append(lookups, place{kind, with / r.val(k)})
				binds = append(binds, place{kind, r.val(key{scen: scFlood, shape: kind, n: n, target: tg.Name, m: bindNs})})
			}
			what := fmt.Sprintf("%s sockets of the %s shape", fmtInt(n), kinds[0])
			if len(kinds) > 1 {
				what = fmt.Sprintf("%s sockets in each of the other %d shapes", fmtInt(n), len(kinds))
			}
			gs = append(gs,
				limit(fmt.Sprintf("Floods, %s: with %s beside the victim, its lookup within %d× of none",
					tg.Name, what, floodLookupMax), lookups, true, floodLookupMax, fmtX),
				limit(fmt.Sprintf("Floods, %s: with %s beside the victim, the next bind at most %s",
					tg.Name, what, fmtNs(floodBindMax)), binds, true, floodBindMax, fmtNs))
		}
	}
	return gs
}
