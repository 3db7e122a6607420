package fixed

import (
	"github.com/udpdemux/udpdemux/lookup"
)

// matchPrimary appends to rs every entry of q's primary chain that
// receives the multicast or broadcast datagram q (Linux
// __udp4_lib_mcast_deliver).
func (t *tables) matchPrimary(q *lookup.Query, rs []*lookup.Entry) []*lookup.Entry {
	for n := t.h1.Slot(q.DstPort).Chain.First(); n != nil; n = n.Next.Load() {
		if e := lookup.OfPrimary(n); lookup.Matches(e, q) {
			rs = append(rs, e)
		}
	}
	return rs
}

// matchSecondary appends the receivers of q found in its exact and
// wildcard secondary slots. With limit ≥ 0 it gives up (false) on meeting a
// slot longer than limit. It re-runs the search if a socket moved between
// the two slots meanwhile, so that no socket is missed or seen twice, up
// to lookup.ReadTries times; then it gives up too, and the caller matches
// the primary chain (see secondary).
func (t *tables) matchSecondary(q *lookup.Query, rs []*lookup.Entry, limit int) ([]*lookup.Entry, bool) {
	h2 := t.h2
	i := h2.Index(h2.AddrHash(q.Dst), q.DstPort)
	w := h2.Index(h2.WildHash(), q.DstPort)
	exact, wild := h2.At(i), h2.At(w)
	if limit >= 0 && (exact.Chain.Len() > limit || wild.Chain.Len() > limit) {
		return rs, false
	}
	base := len(rs)
	for range lookup.ReadTries {
		rs = rs[:base]
		seq, ok := exact.Seq.TryRead()
		wseq, wok := wild.Seq.TryRead()
		if !ok || !wok {
			continue
		}
		for n := exact.Chain.First(); n != nil; n = n.Next.Load() {
			if e := lookup.OfSecondary(n); lookup.Matches(e, q) {
				rs = append(rs, e)
			}
		}
		if i != w {
			for n := wild.Chain.First(); n != nil; n = n.Next.Load() {
				if e := lookup.OfSecondary(n); lookup.Matches(e, q) {
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

// matchHybrid chooses between matchPrimary and matchSecondary by the
// hybrid rule, and reports the path it took.
func (t *tables) matchHybrid(q *lookup.Query, rs []*lookup.Entry) ([]*lookup.Entry, lookup.Path) {
	p := t.h1.Slot(q.DstPort).Chain.Len()
	if p > t.threshold {
		if out, ok := t.matchSecondary(q, rs, p); ok {
			return out, lookup.Secondary
		}
		return t.matchPrimary(q, rs), lookup.Fallback
	}
	return t.matchPrimary(q, rs), lookup.Primary
}
