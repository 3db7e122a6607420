package lookup

import "sync/atomic"

// Order sets e's tie-break order and its Hash4 flag after a connect that
// replaces old, drawing new orders from seq, the table's counter. A
// connect that changes the local address's hash key rehashes the socket,
// which makes it the most recently bound (one that keeps a wildcard, "::"
// becoming ::ffff:0.0.0.0, stays where it was). The first connect with a
// source address also puts the socket in Linux's 4-tuple hash, where later
// connects leave it: the entry keeps 4-tuple precedence while its 4-tuple
// is that one. The caller holds the socket's primary slot lock.
func Order(e, old *Entry, seq *atomic.Uint64) {
	sk := e.Sock()
	if e.Key() != old.Key() {
		sk.BindSeq = seq.Add(1)
	}
	f, ok := sk.First4()
	// A socket that kept its wildcard is not in the 4-tuple hash.
	if !ok && !e.IsWild() {
		f, ok = TupleOf(e), true
		f.Seq = seq.Add(1)
	}
	Place4(e, f, ok)
}

// Place4 sets e's Hash4 flag and order from f, its socket's place in the
// 4-tuple hash (ok: it has one). A connected e whose 4-tuple is f's has the
// 4-tuple precedence, in f's order, and holds f; any other e is ordered by
// its socket's last bind or rehash. The caller holds the socket's primary
// slot lock.
func Place4(e *Entry, f Tuple, ok bool) {
	sk := e.Sock()
	if ok && e.Has(Connected) && TupleOf(e).With(f.Seq) == f {
		e.Flags |= Hash4
		e.Seq = f.Seq
		sk.holdFirst4(e)
		return
	}
	e.Flags &^= Hash4
	e.Seq = sk.BindSeq
}

// With returns t with seq as its order.
func (t Tuple) With(seq uint64) Tuple {
	t.Seq = seq
	return t
}
