package difftest

import (
	"net/netip"

	"github.com/udpdemux/udpdemux/demux"
)

// A Case is a fixed sequence that the random generator reaches rarely or
// once missed; each runs on every configuration.
type Case struct {
	Name string
	Ops  []Op
}

// Cases are the fixed sequences.
var Cases = []Case{
	{
		// Two dual-stack sockets on one port hold the IPv4 placeholder
		// 127.0.0.6: the older bound to device 2 (+4), the newer once
		// connected to the IPv4 peer 10.0.0.1, which Linux remembers
		// after the socket reconnects to an IPv6 peer (+4). The scores
		// tie, so the newer socket receives the datagram (checked on
		// Linux 6.18).
		Name: "placeholder fallback: remembered IPv4 peer scores",
		Ops: []Op{
			{Kind: Bind, Opts: demux.Options{Addr: addr("::"), Port: 7000, ReuseAddr: true, Device: 2}},
			{Kind: Bind, Opts: demux.Options{Addr: addr("::"), Port: 7000, ReuseAddr: true}},
			{Kind: Connect, Ref: 0, Remote: netip.MustParseAddrPort("[::2]:9000"), Local: addr("::1")},
			{Kind: Connect, Ref: 1, Remote: netip.MustParseAddrPort("[::2]:9000"), Local: addr("::1")},
			{Kind: Connect, Ref: 1, Remote: netip.MustParseAddrPort("10.0.0.1:9000")},
			{Kind: Connect, Ref: 1, Remote: netip.MustParseAddrPort("[::2]:9000")},
			{Kind: Lookup, Src: netip.MustParseAddrPort("10.0.0.1:9000"), Dst: netip.MustParseAddrPort("127.0.0.6:7000"), Ifindex: 2},
		},
	},
}
