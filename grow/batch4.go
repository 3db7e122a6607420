package grow

import (
	"github.com/udpdemux/udpdemux/bhash"
	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/lookup"
)

// LookupBatch4 is LookupBatch for IPv4 datagrams: out[i] is the Ref of
// the socket that receives ts[i], the one Lookup4 gives it, for up to
// BatchMax datagrams; the zero Ref if none does or ok[i] marks the
// datagram undeliverable.
//
// It works in stages over the batch, so that the cache misses of
// independent datagrams overlap: every port slot, then the line of every
// destination key in addrs, then the entry each line holds for its key,
// whose Ref it copies to out[i] — the answer for most datagrams. Then it
// runs Lookup4 on each datagram, whose reads the stages brought into the
// cache, and stores its answer where it is another. So each answer is
// Lookup4's; the stages decide nothing, and a move meanwhile is Lookup4's
// to notice.
func (g *Engine) LookupBatch4(ts []lookup.Tuple4, ok []bool, out []sock.Ref) {
	n := min(len(ts), len(ok), len(out), BatchMax)
	var (
		hs      [BatchMax]uint64
		probes  [BatchMax]bhash.Probe[addrKey, sock.Entry]
		indexed [BatchMax]bool
		heads   [BatchMax]*sock.Entry
		q       lookup.Query
	)
	for i := range n {
		if !ok[i] {
			continue
		}
		if pr := g.port(ts[i].DstPort); pr != nil && pr.list.Len() > g.threshold {
			indexed[i] = true
			hs[i] = g.addrHash(addrKey{sock.Map4(ts[i].Dst), ts[i].DstPort})
		}
	}
	for i := range n {
		if indexed[i] {
			probes[i] = g.addrs.Probe(hs[i])
		}
	}
	for i := range n {
		out[i] = sock.Ref{}
		if indexed[i] {
			if hd, found := probes[i].Find(hs[i], addrKey{sock.Map4(ts[i].Dst), ts[i].DstPort}); found {
				heads[i] = hd.First
				out[i] = hd.First.Ref
			}
		}
	}
	for i := range n {
		if !ok[i] {
			continue
		}
		r, _ := g.Lookup4(&ts[i], &q)
		switch {
		case r == nil:
			out[i] = sock.Ref{}
		case heads[i] == nil || r != &heads[i].Ref:
			out[i] = *r
		}
	}
}
