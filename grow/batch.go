package grow

import (
	"github.com/udpdemux/udpdemux/bhash"
	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/lookup"
)

// BatchMax is the most datagrams LookupBatch takes at once.
const BatchMax = 64

// LookupBatch stores in out[i] the Ref of the socket that receives qs[i],
// as Lookup would, for up to BatchMax datagrams: the zero Ref if none does
// or ok[i] marks the query undeliverable. The Refs are copies, so that
// none points into qs, which may then stay on its caller's stack.
//
// It works in stages over the whole batch — every port record, then every
// exact-address slot, then every chain in those slots, then every entry
// those probes found, then the rest of each lookup — so that the cache misses of independent datagrams
// overlap instead of queueing one behind another, as DPDK's bulk hash
// lookup does. Each datagram's answer is Lookup's: the stages read its
// port's sequence count before the first probe and check it after the
// last, and a datagram whose port saw a move meanwhile is looked up again
// alone.
func (g *Engine) LookupBatch(qs []lookup.Query, ok []bool, out []sock.Ref) {
	n := min(len(qs), len(ok), len(out), BatchMax)
	var (
		prs     [BatchMax]*portSlot
		seqs    [BatchMax]uint32
		hs      [BatchMax]uint64
		probes  [BatchMax]bhash.Probe[addrKey, sock.Entry]
		exact   [BatchMax]bhash.Val[sock.Entry]
		indexed [BatchMax]bool
		bests   [BatchMax]lookup.Best
	)
	for i := range n {
		out[i] = sock.Ref{}
		if ok[i] {
			prs[i] = g.port(qs[i].DstPort)
		}
	}
	for i := range n {
		pr := prs[i]
		if pr == nil || pr.list.Len() <= g.threshold {
			continue
		}
		q := &qs[i]
		indexed[i] = true
		seqs[i] = pr.list.Seq.Read()
		hs[i] = g.addrHash(addrKey{q.Dst, q.DstPort})
		probes[i] = g.addrs.Probe(hs[i])
	}
	for i := range n {
		if indexed[i] {
			q := &qs[i]
			exact[i], _ = probes[i].Find(hs[i], addrKey{q.Dst, q.DstPort})
		}
	}
	// Score the exact-address heads, side by side.
	for i := range n {
		bests[i] = lookup.NewBest()
		if exact[i].First != nil {
			offer(&bests[i], exact[i], &qs[i])
		}
	}
	for i := range n {
		pr, q := prs[i], &qs[i]
		var r *sock.Ref
		switch {
		case pr == nil:
		case !indexed[i]:
			// A port small enough to scan: the single lookup.
			r, _ = g.Lookup(q)
		default:
			e := g.finishBatch(pr, q, &bests[i])
			if pr.list.Seq.Changed(seqs[i]) {
				r, _ = g.Lookup(q)
			} else {
				r = g.finish(pr, e, q)
			}
		}
		if r != nil {
			out[i] = *r
		}
	}
}

// finishBatch completes an indexed search whose exact-address heads b has
// scored: the 4-tuple table, then the wildcard unless an exact-address
// socket won. The winner is the same in any order of offers: the best
// score, then the largest Seq.
func (g *Engine) finishBatch(pr *portSlot, q *lookup.Query, b *lookup.Best) *sock.Face {
	if f := pr.peers.Load(); f != nil && f.mayHave(g.peerHash(q.Src, q.SrcPort)) {
		k := connKey{local: q.Dst, remote: q.Src, lport: q.DstPort, rport: q.SrcPort}
		if hd, ok := g.conns.Get(g.connHash(&k), k); ok {
			offer(b, hd, q)
		}
	}
	if !b.Exact() {
		if hd, ok := g.getAddr(addrKey{sock.Wild4, q.DstPort}); ok {
			offer(b, hd, q)
		}
	}
	return b.E
}
