package demux

import (
	"cmp"
	"iter"
	"slices"
)

// Ports yields the ports that hold at least one socket, in ascending
// order, without taking locks. A port is yielded if it held a socket when
// the iteration reached it; a port that comes into use or goes out of use
// meanwhile may or may not be.
func (t *Table[V]) Ports() iter.Seq[uint16] { return t.occ.Ports() }

// Sockets yields the table's open sockets, port by port in ascending
// order, and on each port in bind order.
//
// The view is consistent port by port: the sockets yielded for a port are
// exactly those bound on it at one instant, read under the port's lock
// (which a concurrent bind, connect or close of that port also takes), so
// it never shows half of a concurrent change. Different ports are read at
// different instants. Hence a socket that stays open during the whole
// iteration is yielded exactly once, a socket closed before it started
// never, and one bound or closed during it at most once. No lock is held
// while the caller's loop body runs, so the body may use the table.
func (t *Table[V]) Sockets() iter.Seq[*Socket[V]] {
	return func(yield func(*Socket[V]) bool) {
		var buf []*Socket[V]
		for p := range t.Ports() {
			// p's sockets, read under its lock, in bind order.
			buf = t.w.portSockets(p, buf[:0])
			slices.SortFunc(buf, func(a, b *Socket[V]) int { return cmp.Compare(a.s.Bound, b.s.Bound) })
			for _, s := range buf {
				if !yield(s) {
					return
				}
			}
		}
	}
}

// portSockets appends the sockets on port p to buf, newest first.
func (w *writes[V, P, E]) portSockets(p uint16, buf []*Socket[V]) []*Socket[V] {
	h := w.e.LockPort(p)
	for _, e := range h.Entries(nil) {
		buf = append(buf, handle[V](e.Sock()))
	}
	w.e.Unlock(h)
	return buf
}
