package main

import (
	"fmt"
	"testing"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// batchTarget names the batch lookup's figures.
const batchTarget = "udpdemux LookupBatch"

func (r *runner) batch() {
	n := batchSize.at(r.c.quick)
	r.printf("%s sockets on one port at distinct addresses (the same-port shape), udpdemux with `demux.Config{}`; "+
		"datagrams to the bound sockets in a random order. *LookupBatch*: `Table.LookupBatch` on batches of %d "+
		"datagrams, time per datagram; *Lookup*: one `Table.Lookup` per datagram; *map floor*: one probe per datagram.\n\n",
		fmtInt(n), suite.BatchSize)
	sh := suite.SamePort(n, 0, r.c.seed)
	const batchSet = "batch"
	res := r.lookupsWith(sh, []string{suite.SetBound}, []suite.Target{suite.Default, suite.Floor}, suite.Options{Budget: r.buildBudget()}, nil,
		func(tg suite.Target, f suite.Fixture) map[string]func(*testing.B) {
			b, ok := f.(suite.Batcher)
			if !ok {
				return nil
			}
			if err := b.CheckBatch(0, checkMax); err != nil {
				r.fail("batch lookup on %s: wrong answer: %v", sh.Name, err)
				return nil
			}
			return map[string]func(*testing.B){batchSet: b.BenchBatch(0)}
		}, nil)
	batch := res.get(batchSet, suite.Default.Name)
	if batch.ok {
		batch.ns /= suite.BatchSize
		batch.allocs /= suite.BatchSize
	}
	r.record(key{scen: scBatch, n: n}, res)
	if batch.ok {
		r.set(key{scen: scBatch, n: n, set: suite.SetBound, target: batchTarget, m: lookupNs}, batch.ns)
		r.set(key{scen: scBatch, n: n, set: suite.SetBound, target: batchTarget, m: allocsPerOp}, batch.allocs)
	}
	single, floor := res.get(suite.SetBound, suite.Default.Name), res.get(suite.SetBound, suite.Floor.Name)
	t := newTable("sockets", "LookupBatch, per datagram", "Lookup", "map floor", "LookupBatch vs Lookup", "LookupBatch ÷ map floor")
	t.add(fmtInt(n), fmtNs(batch.ns), fmtNs(single.ns), fmtNs(floor.ns), fmtFaster(single.ns/batch.ns), fmtX(batch.ns/floor.ns))
	r.printf("%s\nColumns: time per datagram (lower is better); *LookupBatch vs Lookup*: how many times faster a "+
		"datagram is looked up in a batch than alone; *LookupBatch ÷ map floor*: the batch's time per datagram as a "+
		"multiple of one map probe.\n\n", t)
	r.allocNote(res)
	if batch.ok && batch.allocs > 0 {
		r.printf("LookupBatch allocated: %.2f allocs per datagram.\n\n", batch.allocs)
	}
}

func (r *runner) batchGoals() []goal {
	n := batchSize.at(r.c.quick)
	k := key{scen: scBatch, n: n, set: suite.SetBound, m: lookupNs}
	of := func(t string) float64 { k.target = t; return r.val(k) }
	b := of(batchTarget)
	return []goal{
		limit(fmt.Sprintf("Batch of %d at %s sockets: per datagram ≤ one probe of the map floor", suite.BatchSize, fmtInt(n)),
			[]place{{"", b / of(suite.Floor.Name)}}, true, 1, fmtX),
		limit(fmt.Sprintf("Batch of %d at %s sockets: at least 2× faster than %d single lookups", suite.BatchSize, fmtInt(n), suite.BatchSize),
			[]place{{"", of(suite.Default.Name) / b}}, false, 2, fmtFaster),
	}
}
