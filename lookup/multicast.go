package lookup

import "github.com/udpdemux/udpdemux/internal/sock"

// MatchPrimary appends to rs every entry of q's primary chain that
// receives the multicast or broadcast datagram q (Linux
// __udp4_lib_mcast_deliver).
func (t *Tables) MatchPrimary(q *Query, rs []*sock.Entry) []*sock.Entry {
	for n := t.H1.Slot(q.DstPort).Chain.First(); n != nil; n = n.Next.Load() {
		if e := sock.OfPrimary(n); Matches(e, q) {
			rs = append(rs, e)
		}
	}
	return rs
}

// MatchSecondary appends the receivers of q found in its exact and
// wildcard secondary slots. With limit ≥ 0 it gives up (false) on meeting a
// slot longer than limit. It re-runs the search if a socket moved between
// the two slots meanwhile, so that no socket is missed or seen twice, up
// to sock.ReadTries times; then it gives up too, and the caller matches
// the primary chain (see twoPhase).
func (t *Tables) MatchSecondary(q *Query, rs []*sock.Entry, limit int) ([]*sock.Entry, bool) {
	h2 := t.H2
	i := h2.Index(h2.AddrHash(q.Dst), q.DstPort)
	w := h2.Index(h2.WildHash(), q.DstPort)
	exact, wild := h2.At(i), h2.At(w)
	if limit >= 0 && (exact.Chain.Len() > limit || wild.Chain.Len() > limit) {
		return rs, false
	}
	base := len(rs)
	for range sock.ReadTries {
		rs = rs[:base]
		seq, ok := exact.Seq.TryRead()
		wseq, wok := wild.Seq.TryRead()
		if !ok || !wok {
			continue
		}
		for n := exact.Chain.First(); n != nil; n = n.Next.Load() {
			if e := sock.OfSecondary(n); Matches(e, q) {
				rs = append(rs, e)
			}
		}
		if i != w {
			for n := wild.Chain.First(); n != nil; n = n.Next.Load() {
				if e := sock.OfSecondary(n); Matches(e, q) {
					rs = append(rs, e)
				}
			}
		}
		if !exact.Seq.Changed(seq) && !wild.Seq.Changed(wseq) {
			return rs, true
		}
	}
	return rs[:base], false
}

// MatchHybrid chooses between MatchPrimary and MatchSecondary by the
// hybrid rule, and reports the path it took.
func (t *Tables) MatchHybrid(q *Query, rs []*sock.Entry) ([]*sock.Entry, Path) {
	p := t.H1.Slot(q.DstPort).Chain.Len()
	if p > t.Threshold {
		if out, ok := t.MatchSecondary(q, rs, p); ok {
			return out, Secondary
		}
		return t.MatchPrimary(q, rs), Fallback
	}
	return t.MatchPrimary(q, rs), Primary
}
