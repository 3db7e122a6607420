package demux

import (
	"iter"
	"net/netip"
)

// Multicast returns the receivers of a multicast or broadcast datagram from
// src to dst arriving on ifindex, as LookupMulticast yields them, as an
// iterator: for s, v := range t.Multicast(src, dst, ifindex) { ... }. Each
// iteration searches the table afresh. Like LookupMulticast it holds no
// lock while the loop body runs and, for up to 16 receivers, does not
// allocate (TestMulticastIterator, BenchmarkMulticast).
func (t *Table[V]) Multicast(src, dst netip.AddrPort, ifindex int) iter.Seq2[*Socket[V], V] {
	return func(yield func(*Socket[V], V) bool) { t.LookupMulticast(src, dst, ifindex, yield) }
}
