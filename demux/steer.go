package demux

import (
	"iter"
	"net/netip"

	"github.com/udpdemux/udpdemux/lookup"
)

// Group is an SO_REUSEPORT group: the unconnected ReusePort sockets with
// the same address, port, device, family, V6Only and owner, which share
// the datagrams that reach them. Socket.Group returns it. Two Group values
// are == when they are the same group. The zero Group has no members.
//
// Which member receives a datagram: the group's selector, if it has one
// and it picks a member; else the member at the position the datagram's
// flow hash (seeded by Config.FlowSeed) scales to, hash·n/2³².
//
// Members are kept in Linux's order: in the order they joined, and when
// one leaves (closes, connects or changes device), the last member takes
// its place. With the flow hash, a flow's position is fixed by n alone,
// so when n changes most flows move, as in Linux: when a member joins,
// half of the flows go to another member; when the 4th of 9 leaves, 57%
// (TestReusePortRemap measures both). A selector that keeps flows in
// place, such as Rendezvous, moves only about 1/n of them.
type Group[V any] struct {
	g    *lookup.Group
	t    *Table[V]
	port uint16 // every member's, whose lock guards the group's writes
}

// Group returns the socket's SO_REUSEPORT group, and false if it is in
// none: it was bound without ReusePort, or is connected, or closed. A
// socket that is alone in its group has a group of one.
func (s *Socket[V]) Group() (Group[V], bool) {
	e := s.s.Cur.Load()
	if s.s.Closed.Load() || e == nil || e.Group == nil {
		return Group[V]{}, false
	}
	return Group[V]{g: e.Group, t: s.h.t, port: e.Port}, true
}

// Members returns a copy of the group's members: the sockets that were
// its members at one moment during the call, each once, in the group's
// order at that moment (see Group). It does not change when members join
// or leave later. A socket that stayed a member throughout the call is
// in it; one that left before the call, or joined after, is not.
//
// It takes no lock while it can copy the members between joins and
// leaves; if these keep overlapping its copies, it copies once under the
// lock of the group's port, as a bind does, so that it returns whatever
// writers do.
func (g Group[V]) Members() Members[V] {
	if g.g == nil {
		return Members[V]{}
	}
	v, ok := g.g.Snapshot()
	if !ok {
		g.t.w.withPort(g.port, func() { v = g.g.SnapshotLocked() })
	}
	return Members[V]{v: v}
}

// Pick returns the member that receives the datagrams of the flow src →
// dst arriving on ifindex, as Lookup chooses it once the lookup has
// reached this group; nil if the group has no members or the datagram
// could not be delivered (see Lookup).
func (g Group[V]) Pick(src, dst netip.AddrPort, ifindex int) *Socket[V] {
	var q lookup.Query
	if g.g == nil || !q.Init(src, dst, ifindex) {
		return nil
	}
	if e := lookup.Member(g.g, g.t.seed, &q); e != nil {
		return handle[V](e.Sock())
	}
	return nil
}

// SetSelector makes sel choose the member that receives each datagram the
// group gets, as a program attached with SO_ATTACH_REUSEPORT_CBPF or
// SO_ATTACH_REUSEPORT_EBPF does in Linux; nil removes it. The selector
// belongs to the group: sockets that join later are steered by it too, and
// it ends with the group's last member. Lookups call it, without locks and
// concurrently, only for groups of two or more members; it must be fast,
// must not block and must not call the table's write methods.
func (g Group[V]) SetSelector(sel Selector[V]) {
	if g.g == nil {
		return
	}
	if sel == nil {
		g.g.SetSelector(nil)
		return
	}
	g.g.SetSelector(func(f lookup.Flow, m lookup.View) int {
		d := Datagram{
			Src:     netip.AddrPortFrom(f.Src.Addr(f.Is4), f.SrcPort),
			Dst:     netip.AddrPortFrom(f.Dst.Addr(f.Is4), f.DstPort),
			Ifindex: int(f.Ifindex),
			Payload: f.Payload,
		}
		return sel(d, f.Hash, Members[V]{v: m})
	})
}

// Selector picks which member of an SO_REUSEPORT group receives datagram
// d: it returns an index in members, or declines with any index outside
// [0, members.Len()) (say -1), and then the flow hash picks. hash is d's
// flow hash, the one the default choice uses. An IPv4 datagram's addresses
// are in 4-byte form. d.Payload is the datagram's payload when the lookup
// was given it (LookupDatagram, LookupBatch), as an eBPF reuseport program
// sees the packet, so that a selector can steer by what the datagram
// says, such as a QUIC connection ID; it is nil from Lookup and Pick. A
// selector must not modify or keep it.
type Selector[V any] func(d Datagram, hash uint32, members Members[V]) int

// Members is a read-only view of a group's members. The one a Selector
// gets is the group's own array at the moment of the lookup, as a BPF
// program sees Linux's: its length is fixed, but a member that leaves
// meanwhile may be replaced in place by the last one.
type Members[V any] struct{ v lookup.View }

// Len returns the number of members.
func (m Members[V]) Len() int { return m.v.Len() }

// At returns the i-th member, 0 ≤ i < Len(); it panics for another i.
func (m Members[V]) At(i int) *Socket[V] { return handle[V](m.v.At(i).Sock()) }

// All yields the members with their indexes, in order.
func (m Members[V]) All() iter.Seq2[int, *Socket[V]] {
	return func(yield func(int, *Socket[V]) bool) {
		for i := range m.v.Len() {
			if !yield(i, handle[V](m.v.At(i).Sock())) {
				return
			}
		}
	}
}

// Rendezvous returns a selector that keeps flows on their member when
// others join or leave (rendezvous, or highest-random-weight, hashing):
// each member gets a weight from the flow hash and key(member), and the
// heaviest receives. A join takes about 1/n of the flows to the new
// member and moves no other; a leave moves only the leaver's flows. key
// names a member stably — for instance a worker number kept in the
// socket's value, so that tables on other hosts with the same
// Config.FlowSeed agree; nil uses the socket's bind order, stable within
// the table only. It costs one key call and one hash per member per
// datagram, where the default costs nothing per member.
func Rendezvous[V any](key func(*Socket[V]) uint64) Selector[V] {
	return func(_ Datagram, hash uint32, m Members[V]) int {
		best, bestW := -1, uint64(0)
		for i := range m.v.Len() {
			e := m.v.At(i)
			k := e.Sock().Bound
			if key != nil {
				k = key(handle[V](e.Sock()))
			}
			if w := weight(hash, k); best < 0 || w > bestW {
				best, bestW = i, w
			}
		}
		return best
	}
}

// weight is a member's rendezvous weight for a flow: a mix of both, so
// that each member's weights are independent across flows.
func weight(hash uint32, key uint64) uint64 { return lookup.Mix(key*0x9e3779b97f4a7c15 ^ uint64(hash)) }
