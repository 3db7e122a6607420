package main

import (
	"fmt"
	"sort"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// The aliasing scenario's attacks.
const (
	attackReuseAddr = "reuseaddr"
	attackGroup     = "reuseport-group"
)

// aliasTargets are the configurations the attack is run against.
var aliasTargets = []suite.Target{suite.Default, suite.Fixed4096}

func (r *runner) aliasing() {
	n := aliasingAttackers.at(r.c.quick)
	r.printf("A victim socket on 10.0.0.1:%d, and a local attacker's %s sockets on 10.0.0.1:%d (%d + 4 096), either "+
		"each with SO_REUSEADDR (*%s*) or all in one SO_REUSEPORT group (*%s*). In a table of 4 096 slots whose "+
		"indexes take the port as it is, both ports share every slot: a local tenant can slow down another's "+
		"port. Datagrams from random sources to the victim; the baseline is the same lookups in a table of the "+
		"same configuration that holds the victim alone, timed in the same rounds as the attacked table, one "+
		"after the other, so that each row's two figures saw the machine in the same states.\n\n",
		suite.VictimPort, fmtInt(n), suite.AliasPort, suite.VictimPort, attackReuseAddr, attackGroup)
	t := newTable("configuration, attack", "without attackers", "with attackers", "with ÷ without")
	o := suite.Options{Budget: aliasingBudget.at(r.c.quick)}
	for _, tg := range aliasTargets {
		for _, attack := range []string{attackReuseAddr, attackGroup} {
			shs := []*suite.Shape{suite.Aliased(n, attack == attackGroup, r.c.seed), suite.Aliased(0, false, r.c.seed)}
			ress := r.lookupsAcross(shs, []string{suite.SetVictim}, []suite.Target{tg}, o, nil, nil, nil)
			// The baseline is recorded with its attack's row, as n 0.
			r.record(key{scen: scAliasing, shape: attack, n: n}, ress[0])
			r.record(key{scen: scAliasing, shape: attack, n: 0}, ress[1])
			a, b := ress[0].get(suite.SetVictim, tg.Name), ress[1].get(suite.SetVictim, tg.Name)
			t.add(fmt.Sprintf("%s, %s", tg.Name, attack), fmtNs(b.ns), fmtNs(a.ns), fmtX(a.ns/b.ns))
		}
	}
	r.printf("%s\nColumns: time per lookup for the victim (lower is better); *with ÷ without*: how many times slower "+
		"the attackers make it.\n\n", t)
}

func (r *runner) aliasingGoals() []goal {
	n := aliasingAttackers.at(r.c.quick)
	var gs []goal
	for _, tg := range aliasTargets {
		var ps []place
		for _, attack := range []string{attackReuseAddr, attackGroup} {
			k := key{scen: scAliasing, shape: attack, n: n, set: suite.SetVictim, target: tg.Name, m: lookupNs}
			w := r.val(k)
			k.n = 0
			ps = append(ps, place{attack, w / r.val(k)})
		}
		gs = append(gs, limit(fmt.Sprintf("Port aliasing, %s: with %s attackers on port %d, the victim's lookup within 2× of none",
			tg.Name, fmtInt(n), suite.AliasPort), ps, true, 2, fmtX))
	}
	return gs
}

// everywhereGoals judges the goals that hold for every lookup of the run.
func (r *runner) everywhereGoals() []goal {
	var ps []place
	for k, v := range r.vals {
		if k.m == allocsPerOp && (isDemux(k.target) || k.target == batchTarget) {
			ps = append(ps, place{fmt.Sprintf("%s %s/%s %d %s", k.scen, k.shape, k.set, k.n, k.target), v})
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].label < ps[j].label })
	g := limit("Everywhere: 0 allocations per lookup (every udpdemux lookup measured in this run)", ps, true, 0, fmtAllocs)
	if len(ps) > 0 && g.verdict == met {
		g.measured = fmt.Sprintf("0 allocs in all %d measurements", len(ps))
	}
	return []goal{g}
}
