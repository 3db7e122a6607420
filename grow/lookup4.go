package grow

import (
	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// Lookup4 is Lookup for the IPv4 datagram t. Most IPv4 datagrams to an
// indexed port are settled by the newest entry of one key: a connected
// socket's 4-tuple, the destination address, or the wildcard. Lookup4
// settles those from t alone (search4), and fills q in from t for what
// needs the general search: a key with several classes, a wildcard-tier
// candidate under the destination's key, a move under way, an SO_REUSEPORT
// group's flow hash, or the 127.0.0.6 fallback. It gives Lookup's answer
// and path, takes no lock and does not allocate.
func (g *Engine) Lookup4(t *lookup.Tuple4, q *lookup.Query) (*sock.Ref, lookup.Path) {
	pr := g.port(t.DstPort)
	if pr == nil {
		return nil, lookup.Primary
	}
	seq := pr.list.Seq.Peek()
	if n, shared := pr.list.LenMarked(); n <= g.threshold {
		q.Set4(t)
		return g.finish(pr, g.scan(pr, q, seq, shared), q), lookup.Primary
	}
	if e, ok := g.search4(pr, t, seq); ok {
		if e != nil && e.Group == nil {
			return &e.Ref, lookup.Secondary
		}
		if e == nil && t.Dst != ipv6.Placeholder4 {
			return nil, lookup.Secondary
		}
		q.Set4(t)
		return g.finish(pr, e, q), lookup.Secondary
	}
	q.Set4(t)
	return g.finish(pr, g.indexed(pr, q), q), lookup.Secondary
}

// search4 is indexed for an IPv4 datagram, where each key it reads has
// one class. It reports false, and the caller runs indexed, where it
// cannot tell the answer so: a key with several classes, a candidate of
// the destination's key that is not bound to it, or a count of pr's moves
// (seq, as Peek read it) that was odd or changed. As in indexed, a 4-tuple
// match bound to the destination is taken at once, and any other answer
// only if no move began or ended meanwhile.
func (g *Engine) search4(pr *portSlot, t *lookup.Tuple4, seq uint32) (*sock.Face, bool) {
	if seq&1 != 0 {
		return nil, false
	}
	src := sock.Map4(t.Src)
	if f := pr.peers.Load(); f != nil && f.mayHave(g.peerHash(src, t.SrcPort)) {
		if hd, ok := g.getConn(connKey{local: sock.Map4(t.Dst), remote: src, lport: t.DstPort, rport: t.SrcPort}); ok {
			if hd.Rest == nil && lookup.ExactScore(lookup.Score4(&hd.First.Face, t)) {
				return &hd.First.Face, true
			}
			return nil, false
		}
	}
	var e *sock.Face
	if hd, ok := g.getAddr(addrKey{sock.Map4(t.Dst), t.DstPort}); ok {
		if hd.Rest != nil {
			return nil, false
		}
		// A class matches as a whole, so a key whose one class does not
		// match is as good as absent.
		if s := lookup.Score4(&hd.First.Face, t); lookup.ExactScore(s) {
			e = &hd.First.Face
		} else if s >= 0 {
			// No entry reaches this today: one stored under an IPv4
			// address's key is bound to that address. The general
			// search keeps the answer right should keying change.
			return nil, false
		}
	}
	if e == nil {
		if hd, ok := g.getAddr(addrKey{sock.Wild4, t.DstPort}); ok {
			if hd.Rest != nil {
				return nil, false
			}
			if lookup.Score4(&hd.First.Face, t) >= 0 {
				e = &hd.First.Face
			}
		}
	}
	return e, !pr.list.Seq.Changed(seq)
}
