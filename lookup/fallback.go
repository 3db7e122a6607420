package lookup

// Placeholder4 is the IPv4 address Linux gives the IPv4 side of a
// dual-stack socket that connected to an IPv6 peer: 127.0.0.6. It still
// conflicts with 0.0.0.0 and 127.0.0.6 binds (DESIGN.md row 24) and is
// reached by the placeholder fallback (DESIGN.md, "The placeholder
// fallback").
const Placeholder4 uint32 = 127<<24 | 6

// PlaceholderFallback finds, in the primary chain that starts at n, the
// receiver of an IPv4 datagram to 127.0.0.6 that no ordinary candidate
// took (DESIGN.md, "The placeholder fallback"), as Linux (6.13 onwards)
// does when both of its secondary-table searches come back empty: it
// scores the primary chain against the exact destination, and there a dual-stack socket that
// connected to an IPv6 peer answers on its IPv4 placeholder 127.0.0.6.
// Such a socket has no IPv4 peer address, so only the source port is
// checked — unless it once connected to an IPv4 peer: Linux keeps that
// peer's address, even after a later connect to an IPv6 peer, and checks
// it.
// The caller passes only datagrams to 127.0.0.6 that found nothing else.
func PlaceholderFallback(n *Node, q *Query) *Ref {
	b := Best{}
	for ; n != nil; n = n.Next.Load() {
		e := OfPrimary(n)
		if e.Port != q.DstPort || e.Flags&(Is6|V6Only|HasV4|Connected) != Is6|Connected || e.V4 != Placeholder4 {
			continue
		}
		if e.RemotePort != q.SrcPort {
			continue
		}
		s := 1 + 4
		if e.Peer4 != 0 {
			if Map4(e.Peer4) != q.Src {
				continue
			}
			s += 4
		}
		if e.Device != 0 {
			if e.Device != q.Ifindex {
				continue
			}
			s += 4
		}
		// Ties go to the socket bound last: Linux scans the port's
		// primary chain, where a connect does not move a socket.
		if s > b.score || (s == b.score && e.Sock().Bound > b.E.Sock().Bound) {
			b.E, b.score = &e.Face, s
		}
	}
	if b.E == nil {
		return nil
	}
	return &b.E.Ref
}

// ToPlaceholder reports whether q is an IPv4 datagram to the placeholder
// 127.0.0.6: one that found no receiver goes to PlaceholderFallback.
func ToPlaceholder(q *Query) bool { return q.is4 && q.Dst.V4() == Placeholder4 }
