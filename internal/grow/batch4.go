package grow

import (
	"github.com/udpdemux/udpdemux/lookup"
)

// LookupBatch4 is LookupBatch for IPv4 datagrams: out[i] is the socket
// that receives ts[i], the one Lookup4 gives it, for up to BatchMax
// datagrams; nil if none does or ok[i] marks the datagram undeliverable.
//
// It warms the cache first, in stages over the batch, so that the misses
// of independent datagrams overlap instead of queueing one behind
// another, as DPDK's bulk hash lookup does: every destination key's hash
// (and the 4-tuple's, where the port's peer filter may hold the source),
// then every line those hashes pick (Map.Guess), then the entry each
// line most likely holds for its key. Each stage is a short loop, so that
// the processor has many misses in flight at once. Then it runs Lookup4's
// search on each datagram's tuple (lookup4), whose reads the stages
// brought into the cache. The stages decide nothing: each answer is
// Lookup4's, and a move meanwhile is that search's to notice.
//
// It returns sockets, not Refs: a Ref's value lies in its entry's second
// cache line, which the lookup of an unconnected socket does not read
// otherwise, and the stages warm only the first.
func (g *Engine) LookupBatch4(ts []lookup.Tuple4, ok []bool, out []*lookup.Socket) {
	n := min(len(ts), len(ok), len(out), BatchMax)
	var w warming
	for i := range n {
		if t := &ts[i]; ok[i] {
			g.stage(&w, lookup.Map4(t.Dst), lookup.Map4(t.Src), t.DstPort, t.SrcPort)
		}
	}
	g.warm(&w)
	var q lookup.Query
	for i := range n {
		out[i] = nil
		if t := &ts[i]; ok[i] {
			if r, _ := g.lookup4(t.Src, t.Dst, t.SrcPort, t.DstPort, t.Ifindex, &q); r != nil {
				out[i] = r.Sock
			}
		}
	}
}
