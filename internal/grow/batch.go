package grow

import (
	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/lookup"
)

// BatchMax is the most datagrams LookupBatch takes at once.
const BatchMax = 64

// LookupBatch stores in out[i] the socket that receives qs[i], as Lookup
// would, for up to BatchMax datagrams: nil if none does or ok[i] marks
// the query undeliverable. It is LookupBatch4 for datagrams of any
// family: it warms the cache in the same stages, then runs Lookup on each
// datagram.
func (g *Engine) LookupBatch(qs []lookup.Query, ok []bool, out []*sock.Socket) {
	n := min(len(qs), len(ok), len(out), BatchMax)
	var (
		ahs, chs [BatchMax]uint64
		na, nc   int
	)
	for i := range n {
		q := &qs[i]
		if !ok[i] {
			continue
		}
		slot := g.port(q.DstPort)
		if slot == nil || slot.list.Len() <= g.threshold {
			continue
		}
		if f := slot.peers.Load(); f != nil && f.mayHave(g.peerHash(q.Src, q.SrcPort)) {
			chs[nc] = g.connHash(&connKey{local: q.Dst, remote: q.Src, lport: q.DstPort, rport: q.SrcPort})
			nc++
		}
		ahs[na] = g.addrHash(addrKey{q.Dst, q.DstPort, 0})
		na++
	}
	g.warmBatch(ahs[:na], chs[:nc])
	for i := range n {
		out[i] = nil
		if ok[i] {
			if r, _ := g.Lookup(&qs[i]); r != nil {
				out[i] = r.Sock
			}
		}
	}
}

// warmBatch brings into the cache, for a batch, the lines of addrs that
// hold the hashes ahs and the lines of conns that hold chs, then the
// entry each line most likely holds for its key (Map.Guess), each
// stage a short loop over the whole batch so that its cache misses
// overlap. It decides nothing.
func (g *Engine) warmBatch(ahs, chs []uint64) {
	var es [2 * BatchMax]*sock.Entry
	g.conns.Guess(chs, es[:len(chs)])
	g.addrs.Guess(ahs, es[len(chs):len(chs)+len(ahs)])
	for _, e := range es[:len(chs)+len(ahs)] {
		if e != nil {
			// An atomic load, which the compiler keeps though its
			// value goes unused; it costs what a plain load does.
			e.N1.Next.Load()
		}
	}
}
