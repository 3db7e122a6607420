package demux

import (
	"net/netip"
	"unsafe"

	"github.com/udpdemux/udpdemux/internal/grow"
	"github.com/udpdemux/udpdemux/lookup"
)

// Lookup returns the socket that receives a unicast datagram from src to
// dst arriving on interface ifindex, and the value attached to it; a nil
// socket if none does. A v4-mapped src or dst stands for the IPv4 datagram.
// It does not allocate, and takes no lock unless writers keep moving
// sockets of dst's port (connect, disconnect, SetDevice) across each of
// its few searches of the indexes: then it searches once more, with the
// growing storage under the port's lock, with fixed Slots in the port's
// primary chain, so that it returns whatever the writers do.
func (t *Table[V]) Lookup(src, dst netip.AddrPort, ifindex int) (*Socket[V], V) {
	var q lookup.Query
	var r *lookup.Ref
	var p lookup.Path
	if t.g != nil && src.Addr().Is4() && dst.Addr().Is4() {
		var ok bool
		if r, p, ok = t.g.Lookup4(src, dst, ifindex, &q); !ok {
			var zero V
			return nil, zero
		}
	} else {
		if !q.Init(src, dst, ifindex) {
			var zero V
			return nil, zero
		}
		r, p = t.search(&q)
	}
	return t.found(r, p)
}

// LookupDatagram is Lookup for the datagram d, whose payload, if d.Payload
// is not nil, the selector of an SO_REUSEPORT group that d reaches sees
// (see Selector). It takes no lock and does not allocate.
func (t *Table[V]) LookupDatagram(d Datagram) (*Socket[V], V) {
	if d.Payload == nil {
		return t.Lookup(d.Src, d.Dst, d.Ifindex)
	}
	var q lookup.Query
	if !q.Init(d.Src, d.Dst, d.Ifindex) {
		var zero V
		return nil, zero
	}
	q.Payload = d.Payload
	return t.found(t.search(&q))
}

// search finds the Ref that receives q, by the general search of the
// table's storage, which follows the strategy.
func (t *Table[V]) search(q *lookup.Query) (*lookup.Ref, lookup.Path) {
	if t.g != nil {
		return t.g.Lookup(q)
	}
	return t.f.Lookup(q)
}

// found returns the socket and value of r, a lookup's answer by path p.
func (t *Table[V]) found(r *lookup.Ref, p lookup.Path) (*Socket[V], V) {
	if t.count {
		t.stats.lookup(p)
	}
	if r == nil {
		var zero V
		return nil, zero
	}
	return handle[V](r.Sock), t.value(r)
}

// LookupMulticast calls yield for every socket that receives a multicast or
// broadcast datagram from src to dst arriving on ifindex, until yield
// returns false: sockets on dst's port whose local address is dst or a
// wildcard that reaches it, whose peer (if connected) is src, and whose
// device (if any) is ifindex. Group membership is the caller's business: it
// should filter the sockets by the groups they joined. Each socket is
// yielded once, from a consistent view of the table. For up to 16
// receivers it does not allocate. It takes no lock unless writers keep
// moving sockets of dst's port across each of its few searches, and then
// searches once more as Lookup does; either way it takes the time of one
// search, after a few, whatever writers do. The table holds no lock while
// yield runs. A nil yield makes it a no-op.
func (t *Table[V]) LookupMulticast(src, dst netip.AddrPort, ifindex int, yield func(*Socket[V], V) bool) {
	var q lookup.Query
	if yield == nil || !q.Init(src, dst, ifindex) {
		return
	}
	var buf [16]*lookup.Entry
	var rs []*lookup.Entry
	var p lookup.Path
	if t.g != nil {
		rs, p = t.g.Multicast(&q, buf[:0])
	} else {
		rs, p = t.f.Multicast(&q, buf[:0])
	}
	if t.count {
		t.stats.lookup(p)
	}
	for _, e := range rs {
		if !yield(handle[V](e.Ref.Sock), t.value(&e.Ref)) {
			return
		}
	}
}

// handle returns the public handle of the socket s. Socket embeds
// lookup.Socket as its first field, so the address of one is the address of
// the other; TestHandleLayout checks it.
func handle[V any](s *lookup.Socket) *Socket[V] {
	return (*Socket[V])(unsafe.Pointer(s))
}

// Datagram is the addressing of one received datagram, for LookupBatch
// and LookupDatagram, and its payload if the caller has it.
type Datagram struct {
	Src, Dst netip.AddrPort
	Ifindex  int // the arrival interface, as for Lookup
	// Payload, if not nil, is what the selector of an SO_REUSEPORT group
	// sees as the datagram's payload (see Selector). The lookup neither
	// keeps nor modifies it.
	Payload []byte
}

// LookupBatch looks up a batch of unicast datagrams, as recvmmsg returns
// them: out[i] is the socket that receives ds[i], or nil. It handles the
// first min(len(ds), len(out)) datagrams and returns that count. The
// answers are those of Lookup, one datagram at a time; with the growing
// tables (the default) it works in stages over up to 64 datagrams at once,
// so that their cache misses overlap. A datagram's Payload reaches the
// selectors as with LookupDatagram. It does not allocate, and takes a lock
// only as Lookup does.
func (t *Table[V]) LookupBatch(ds []Datagram, out []*Socket[V]) int {
	n := min(len(ds), len(out))
	if t.g == nil || t.count {
		for i := range n {
			out[i], _ = t.LookupDatagram(ds[i])
		}
		return n
	}
	for done := 0; done < n; {
		m := min(n-done, grow.BatchMax)
		if hasPayload(ds[done:done+m]) || !t.batch4(ds[done:done+m], out[done:done+m]) {
			t.batch(ds[done:done+m], out[done:done+m])
		}
		done += m
	}
	return n
}

// batch4 looks up ds, at most grow.BatchMax datagrams, into out if all of
// them are IPv4 datagrams (lookup.Tuple4), and reports whether they were.
// Each batch path has its own frame, so that a batch of IPv4 datagrams
// does not clear 64 Queries it never uses.
func (t *Table[V]) batch4(ds []Datagram, out []*Socket[V]) bool {
	var (
		ts [grow.BatchMax]lookup.Tuple4
		ok [grow.BatchMax]bool
		rs [grow.BatchMax]*lookup.Socket
	)
	for i := range ds {
		d := &ds[i]
		ok[i] = ts[i].Init(d.Src, d.Dst, d.Ifindex)
		if !ok[i] && !(d.Src.Addr().Is4() && d.Dst.Addr().Is4()) {
			return false // not an IPv4 datagram: Tuple4 refused its family
		}
	}
	t.g.LookupBatch4(ts[:len(ds)], ok[:len(ds)], rs[:len(ds)])
	handles(rs[:len(ds)], out)
	return true
}

// hasPayload reports whether a datagram of ds carries its payload, which
// only the general batch path hands to selectors: Tuple4 has no room for
// it.
func hasPayload(ds []Datagram) bool {
	for i := range ds {
		if ds[i].Payload != nil {
			return true
		}
	}
	return false
}

// batch looks up ds, at most grow.BatchMax datagrams of any family, into
// out.
func (t *Table[V]) batch(ds []Datagram, out []*Socket[V]) {
	var (
		qs [grow.BatchMax]lookup.Query
		ok [grow.BatchMax]bool
		rs [grow.BatchMax]*lookup.Socket
	)
	for i := range ds {
		ok[i] = qs[i].Init(ds[i].Src, ds[i].Dst, ds[i].Ifindex)
		qs[i].Payload = ds[i].Payload
	}
	t.g.LookupBatch(qs[:len(ds)], ok[:len(ds)], rs[:len(ds)])
	handles(rs[:len(ds)], out)
}

// handles stores in out[i] the handle of the socket rs[i].
func handles[V any](rs []*lookup.Socket, out []*Socket[V]) {
	for i, s := range rs {
		out[i] = handle[V](s)
	}
}
