package main

import (
	"fmt"
	"sort"
	"testing"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// The aliasing scenario's attacks.
const (
	attackReuseAddr = "reuseaddr"
	attackGroup     = "reuseport-group"
)

// aliasTargets are the configurations the attack is run against.
var aliasTargets = []suite.Target{suite.Default, suite.Fixed4096}

// setBaseline names the victim's lookups in the table without attackers,
// timed in the rounds of an attacked table.
const setBaseline = "baseline"

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
	base := suite.Aliased(0, false, r.c.seed)
	o := suite.Options{Budget: aliasingBudget.at(r.c.quick)}
	for _, tg := range aliasTargets {
		bf := r.aliasBaseline(tg, base, o)
		for _, attack := range []string{attackReuseAddr, attackGroup} {
			res := r.lookupsWith(suite.Aliased(n, attack == attackGroup, r.c.seed), []string{suite.SetVictim}, []suite.Target{tg}, o, nil,
				func(suite.Target, suite.Fixture) map[string]func(*testing.B) {
					if bf == nil {
						return nil
					}
					return map[string]func(*testing.B){setBaseline: bf.Bench(base.SetIndex(suite.SetVictim))}
				}, nil)
			r.record(key{scen: scAliasing, shape: attack, n: n}, res)
			a, b := res.get(suite.SetVictim, tg.Name), res.get(setBaseline, tg.Name)
			t.add(fmt.Sprintf("%s, %s", tg.Name, attack), fmtNs(b.ns), fmtNs(a.ns), fmtX(a.ns/b.ns))
		}
		if bf != nil {
			bf.Close()
		}
	}
	r.printf("%s\nColumns: time per lookup for the victim (lower is better); *with ÷ without*: how many times slower "+
		"the attackers make it.\n\n", t)
}

// aliasBaseline builds tg's table of base, the victim alone, and checks
// it; nil (with the failure reported) if either fails.
func (r *runner) aliasBaseline(tg suite.Target, base *suite.Shape, o suite.Options) suite.Fixture {
	r.detail(" %s: building %s (%s sockets)", base.Name, tg.Name, fmtInt(len(base.Socks)))
	f, _, err := suite.Prepare(tg, base, o)
	if r.gaveUp("", err) {
		return nil
	}
	if err := f.Check(base.SetIndex(suite.SetVictim), checkMax); err != nil {
		r.fail("%s on %s, set %s: wrong answer: %v", tg.Name, base.Name, suite.SetVictim, err)
		f.Close()
		return nil
	}
	return f
}

func (r *runner) aliasingGoals() []goal {
	n := aliasingAttackers.at(r.c.quick)
	var gs []goal
	for _, tg := range aliasTargets {
		var ps []place
		for _, attack := range []string{attackReuseAddr, attackGroup} {
			k := key{scen: scAliasing, shape: attack, n: n, set: suite.SetVictim, target: tg.Name, m: lookupNs}
			w := r.val(k)
			k.set = setBaseline
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
