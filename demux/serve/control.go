package serve

import "net/netip"

// control is what the reader takes from one datagram's control messages.
type control struct {
	dst     netip.Addr // where the datagram was sent (IPv4 in 4-byte form)
	ifindex int        // the interface it arrived on
	// specDst is IP_PKTINFO's ipi_spec_dst: the destination when the
	// kernel routed it to a local unicast address, and otherwise
	// (broadcast, multicast) the local address a reply would leave from.
	// It is the zero Addr when unknown (IPv6, and systems other than
	// Linux, whose IP_RECVDSTADDR carries the destination only).
	specDst netip.Addr
	drops   uint32 // SO_RXQ_OVFL (Linux): the kernel socket's running drop count
	tos     uint8  // IP_TOS or IPV6_TCLASS (Linux): the traffic class, ECN bits included
	ok      bool   // dst and ifindex were found
	hasDrop bool   // drops was found
}
