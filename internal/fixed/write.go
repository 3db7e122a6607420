package fixed

import (
	"github.com/udpdemux/udpdemux/lookup"
)

// Link publishes a new entry e in both tables: at the head of its
// secondary chain, then of its primary chain. An unconnected ReusePort e
// joins its SO_REUSEPORT group (a new one if there is none) first.
func (x *Engine) Link(h *Held, e *lookup.Entry) {
	i := x.h2.IndexOf(e)
	if e.Has(lookup.ReusePort) && !e.Has(lookup.Connected) {
		e.Group = x.GroupOf(h, e)
		e.Group.Add(e)
	}
	x.h2.Lock(&h.g, i)
	x.h2.Push(i, e)
	x.h1.Slot(e.Port).Chain.PushFront(&e.N1)
}

// GroupOf returns the SO_REUSEPORT group that the unconnected ReusePort
// entry e belongs in, making it if there is none; the caller adds e. The
// group e joins is that of an unconnected ReusePort socket with the same
// address, port, device, family, V6Only and owner, other than e's own
// socket. All such sockets share e's secondary slot, and the caller's
// primary slot lock keeps them in place.
func (x *Engine) GroupOf(h *Held, e *lookup.Entry) *lookup.Group {
	const key = lookup.Is6 | lookup.V6Only | lookup.ReusePort | lookup.Connected
	for n := x.h2.At(x.h2.IndexOf(e)).Chain.First(); n != nil; n = n.Next.Load() {
		o := lookup.OfSecondary(n)
		if o.Group != nil && o.Ref.Sock != e.Ref.Sock && o.Port == e.Port && o.Flags&key == e.Flags&key &&
			o.V4 == e.V4 && o.V6 == e.V6 && o.Device == e.Device && o.Owner == e.Owner {
			return o.Group
		}
	}
	return new(lookup.Group)
}

// Replace puts e, a new state of old's socket on the same port, in old's
// place: a connect, a disconnect or a change of device. An unconnected
// ReusePort e must already be in its group (see GroupOf). The secondary
// table first (see rehash), then the primary chain in one store; then old
// leaves its group.
func (x *Engine) Replace(h *Held, old, e *lookup.Entry) {
	x.rehash(h, old, e)
	x.h1.Slot(e.Port).Chain.Replace(&old.N1, &e.N1)
	if old.Group != nil {
		old.Group.Remove(old)
	}
}

// rehash replaces old by e in the secondary table, moving it to another
// slot if its key changed. A move publishes e in its new slot before it
// unlinks old, inside a sequence count of both slots, so a lookup that
// searched the new slot before the move and the old one after it notices
// and searches again.
func (x *Engine) rehash(h *Held, old, e *lookup.Entry) {
	h2 := x.h2
	oi, ni := h2.IndexOf(old), h2.IndexOf(e)
	os, ns := h2.At(oi), h2.At(ni)
	h2.Lock2(&h.g, oi, ni)
	if oi == ni {
		h2.Replace(oi, old, e)
		return
	}
	os.Seq.Begin()
	ns.Seq.Begin()
	h2.Push(ni, e)
	h2.Remove(oi, old)
	ns.Seq.End()
	os.Seq.End()
}

// Unlink removes e: a close. It leaves the secondary chain, then the
// primary one, then its group.
func (x *Engine) Unlink(h *Held, e *lookup.Entry) {
	i := x.h2.IndexOf(e)
	x.h2.Lock(&h.g, i)
	x.h2.Remove(i, e)
	x.h1.Slot(e.Port).Chain.Remove(&e.N1)
	if e.Group != nil {
		e.Group.Remove(e)
	}
}
