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
	{
		// Routing found no source address (the caller passes the
		// unspecified one): an IPv4 connect keeps the wildcard, "::"
		// shows as ::ffff:0.0.0.0 and can no longer reach IPv6, an IPv6
		// connect fails with EADDRNOTAVAIL, the other family's
		// unspecified address is EINVAL; no rehash, and the first
		// connect with an address is the first for the 4-tuple
		// precedence (all checked on Linux 6.18).
		Name: "connect without a source keeps the wildcard",
		Ops: []Op{
			{Kind: Bind, Opts: demux.Options{Addr: addr("0.0.0.0"), Port: 7100, ReuseAddr: true}},
			{Kind: Bind, Opts: demux.Options{Addr: addr("0.0.0.0"), Port: 7100, ReuseAddr: true}},
			{Kind: Connect, Ref: 1, Remote: netip.MustParseAddrPort("10.0.0.2:6000"), Local: addr("0.0.0.0")},
			{Kind: Connect, Ref: 0, Remote: netip.MustParseAddrPort("10.0.0.2:6000"), Local: addr("0.0.0.0")},
			{Kind: Lookup, Src: netip.MustParseAddrPort("10.0.0.2:6000"), Dst: netip.MustParseAddrPort("127.0.0.1:7100"), Ifindex: 1},
			{Kind: Lookup, Src: netip.MustParseAddrPort("10.0.0.3:6000"), Dst: netip.MustParseAddrPort("127.0.0.1:7100"), Ifindex: 1},
			{Kind: Connect, Ref: 0, Remote: netip.MustParseAddrPort("10.0.0.2:6000"), Local: addr("::")},
			{Kind: Bind, Opts: demux.Options{Addr: addr("::"), Port: 7101}},
			{Kind: Connect, Ref: 7, Remote: netip.MustParseAddrPort("10.0.0.2:6000"), Local: addr("::ffff:0.0.0.0")},
			{Kind: Lookup, Src: netip.MustParseAddrPort("10.0.0.2:6000"), Dst: netip.MustParseAddrPort("127.0.0.1:7101"), Ifindex: 1},
			{Kind: Connect, Ref: 7, Remote: netip.MustParseAddrPort("[::2]:6000"), Local: addr("::")},
			{Kind: Bind, Opts: demux.Options{Addr: addr("::"), Port: 7102, V6Only: true}},
			{Kind: Connect, Ref: 11, Remote: netip.MustParseAddrPort("[::2]:6000"), Local: addr("::")},
			{Kind: Connect, Ref: 11, Remote: netip.MustParseAddrPort("[::2]:6000"), Local: addr("0.0.0.0")},
			{Kind: Bind, Opts: demux.Options{Addr: addr("127.0.0.9"), Port: 7100, ReuseAddr: true, Device: 1}},
			{Kind: Connect, Ref: 14, Remote: netip.MustParseAddrPort("10.0.0.2:6000")},
			{Kind: Lookup, Src: netip.MustParseAddrPort("10.0.0.2:6000"), Dst: netip.MustParseAddrPort("127.0.0.9:7100"), Ifindex: 1},
			{Kind: Connect, Ref: 0, Remote: netip.MustParseAddrPort("10.0.0.2:6000"), Local: addr("127.0.0.9")},
			{Kind: Lookup, Src: netip.MustParseAddrPort("10.0.0.2:6000"), Dst: netip.MustParseAddrPort("127.0.0.9:7100"), Ifindex: 1},
		},
	},
	{
		// Disconnect and SetDevice (checked on Linux 6.18): a wildcard
		// gets its address back and is rehashed, a specific socket keeps
		// its place and first 4-tuple, the device is unbound; SetDevice
		// keeps the place; ReusePort sockets change group.
		Name: "disconnect and set device",
		Ops: []Op{
			{Kind: Bind, Opts: demux.Options{Addr: addr("0.0.0.0"), Port: 7200, ReuseAddr: true}},
			{Kind: Bind, Opts: demux.Options{Addr: addr("0.0.0.0"), Port: 7200, ReuseAddr: true}},
			{Kind: Connect, Ref: 0, Remote: netip.MustParseAddrPort("127.0.0.1:6000"), Local: addr("127.0.0.1")},
			{Kind: Bind, Opts: demux.Options{Addr: addr("0.0.0.0"), Port: 7200, ReuseAddr: true}},
			{Kind: Disconnect, Ref: 0},
			{Kind: Lookup, Src: netip.MustParseAddrPort("127.0.0.1:7000"), Dst: netip.MustParseAddrPort("127.0.0.1:7200"), Ifindex: 1},
			{Kind: Bind, Opts: demux.Options{Addr: addr("127.0.0.1"), Port: 7201, ReuseAddr: true}},
			{Kind: Bind, Opts: demux.Options{Addr: addr("127.0.0.1"), Port: 7201, ReuseAddr: true}},
			{Kind: Connect, Ref: 6, Remote: netip.MustParseAddrPort("127.0.0.1:6000")},
			{Kind: Connect, Ref: 7, Remote: netip.MustParseAddrPort("127.0.0.1:6000")},
			{Kind: Disconnect, Ref: 6},
			{Kind: Lookup, Src: netip.MustParseAddrPort("127.0.0.1:6000"), Dst: netip.MustParseAddrPort("127.0.0.1:7201"), Ifindex: 1},
			{Kind: Connect, Ref: 6, Remote: netip.MustParseAddrPort("127.0.0.1:6000")},
			{Kind: Lookup, Src: netip.MustParseAddrPort("127.0.0.1:6000"), Dst: netip.MustParseAddrPort("127.0.0.1:7201"), Ifindex: 1},
			{Kind: Bind, Opts: demux.Options{Addr: addr("fe80::1%2"), Port: 7202}},
			{Kind: Connect, Ref: 14, Remote: netip.MustParseAddrPort("[fe80::2%2]:6000")},
			{Kind: Disconnect, Ref: 14},
			{Kind: Connect, Ref: 14, Remote: netip.MustParseAddrPort("[::2]:6000"), Local: addr("fe80::1")},
			{Kind: Bind, Opts: demux.Options{Addr: addr("0.0.0.0"), Port: 7203, ReusePort: true}},
			{Kind: Bind, Opts: demux.Options{Addr: addr("0.0.0.0"), Port: 7203, ReusePort: true}},
			{Kind: Bind, Opts: demux.Options{Addr: addr("0.0.0.0"), Port: 7203, ReusePort: true, Device: 1}},
			{Kind: SetDevice, Ref: 18, Ifindex: 1},
			{Kind: SetDevice, Ref: 19, Ifindex: 2},
			{Kind: Lookup, Src: netip.MustParseAddrPort("127.0.0.1:7000"), Dst: netip.MustParseAddrPort("127.0.0.1:7203"), Ifindex: 1},
			{Kind: Lookup, Src: netip.MustParseAddrPort("127.0.0.1:7001"), Dst: netip.MustParseAddrPort("127.0.0.1:7203"), Ifindex: 2},
			{Kind: Close, Ref: 3},
			{Kind: Disconnect, Ref: 3},
			{Kind: SetDevice, Ref: 3, Ifindex: 1},
			// A disconnected socket has no 4-tuple precedence, though it
			// keeps its first 4-tuple: the device-bound socket scores more.
			{Kind: Bind, Opts: demux.Options{Addr: addr("127.0.0.1"), Port: 7204, ReuseAddr: true}},
			{Kind: Connect, Ref: 28, Remote: netip.MustParseAddrPort("127.0.0.1:6000")},
			{Kind: Bind, Opts: demux.Options{Addr: addr("127.0.0.1"), Port: 7204, ReuseAddr: true, Device: 1}},
			{Kind: Disconnect, Ref: 28},
			{Kind: Lookup, Src: netip.MustParseAddrPort("127.0.0.1:6000"), Dst: netip.MustParseAddrPort("127.0.0.1:7204"), Ifindex: 1},
		},
	},
}
