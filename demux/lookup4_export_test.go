package demux

import (
	"net/netip"

	"github.com/udpdemux/udpdemux/lookup"
)

// LookupGeneral is Lookup without the growing tables' IPv4 path
// (grow.Engine.Lookup4): the general search every datagram took before
// it. It returns nil for a table of fixed slots.
func LookupGeneral[V any](t *Table[V], src, dst netip.AddrPort, ifindex int) *Socket[V] {
	var q lookup.Query
	if t.g == nil || !q.Init(src, dst, ifindex) {
		return nil
	}
	if r, _ := t.g.Lookup(&q); r != nil {
		return handle[V](r.Sock)
	}
	return nil
}
