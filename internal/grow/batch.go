package grow

import (
	"github.com/udpdemux/udpdemux/lookup"
)

// BatchMax is the most datagrams LookupBatch takes at once.
const BatchMax = 64

// LookupBatch stores in out[i] the socket that receives qs[i], as Lookup
// would, for up to BatchMax datagrams: nil if none does or ok[i] marks
// the query undeliverable. It is LookupBatch4 for datagrams of any
// family: it warms the cache in the same stages, then runs Lookup on each
// datagram.
func (g *Engine) LookupBatch(qs []lookup.Query, ok []bool, out []*lookup.Socket) {
	n := min(len(qs), len(ok), len(out), BatchMax)
	var w warming
	for i := range n {
		if q := &qs[i]; ok[i] {
			g.stage(&w, q.Dst, q.Src, q.DstPort, q.SrcPort)
		}
	}
	g.warm(&w)
	for i := range n {
		out[i] = nil
		if ok[i] {
			if r, _ := g.Lookup(&qs[i]); r != nil {
				out[i] = r.Sock
			}
		}
	}
}

// warming is what a batch's first stage found: the hashes of the keys of
// addrs and conns that its lookups will read first.
type warming struct {
	ahs, chs [BatchMax]uint64
	na, nc   int
}

// stage adds to w the hashes that the lookup of a datagram to dst:dport
// from src:srcPort reads first, if its port is indexed: its destination
// key's, and its 4-tuple's where the port's peer filter may hold the
// source.
func (g *Engine) stage(w *warming, dst, src lookup.Addr16, dport, srcPort uint16) {
	slot := g.port(dport)
	if slot == nil || slot.list.Len() <= g.threshold {
		return
	}
	if f := slot.peers.Load(); f != nil && f.mayHave(g.peerHash(src, srcPort)) {
		// connHash4 inlines, connHash does not: an IPv4 batch of known
		// peers staged through connHash was measurably slower.
		if dst.IsMapped() && src.IsMapped() {
			w.chs[w.nc] = g.connHash4(dst.V4(), src.V4(), dport, srcPort)
		} else {
			w.chs[w.nc] = g.connHash(&connKey{local: dst, remote: src, lport: dport, rport: srcPort})
		}
		w.nc++
	}
	w.ahs[w.na] = g.addrHash(addrKey{dst, dport, 0})
	w.na++
}

// warm brings into the cache, for a batch, the lines of addrs and conns
// that hold w's hashes, then the entry each line most likely holds for
// its key (Map.Guess), each stage a short loop over the whole batch
// so that its cache misses overlap. It decides nothing.
func (g *Engine) warm(w *warming) {
	var es [2 * BatchMax]*lookup.Entry
	g.conns.Guess(w.chs[:w.nc], es[:w.nc])
	g.addrs.Guess(w.ahs[:w.na], es[w.nc:w.nc+w.na])
	for _, e := range es[:w.nc+w.na] {
		if e != nil {
			// An atomic load, which the compiler keeps though its
			// value goes unused; it costs what a plain load does.
			e.N1.Next.Load()
		}
	}
}
