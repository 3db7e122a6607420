package demux_test

import (
	"net/netip"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// A diffCase is a fixed sequence that the random generator reaches
// rarely or once missed; each runs on every configuration.
type diffCase struct {
	// Name names the case's subtest.
	Name string
	// Ops is the sequence, run from an empty table and model.
	Ops []demuxtest.Op
}

// diffCases are the fixed sequences of TestDifferentialCases, written
// with the constructors below: sockets are named by the index of the op
// that bound them, as in demuxtest.Op.
var diffCases = []diffCase{
	{
		// Two dual-stack sockets on one port hold the IPv4 placeholder
		// 127.0.0.6: the older bound to device 2 (+4), the newer once
		// connected to the IPv4 peer 10.0.0.1, which Linux remembers
		// after the socket reconnects to an IPv6 peer (+4). The scores
		// tie, so the newer socket receives the datagram (checked on
		// Linux 6.18).
		Name: "placeholder fallback: remembered IPv4 peer scores",
		Ops: []demuxtest.Op{
			bind("[::]:7000", demux.Options{ReuseAddr: true, Device: 2}),
			bind("[::]:7000", demux.Options{ReuseAddr: true}),
			connect(0, "[::2]:9000", "::1"),
			connect(1, "[::2]:9000", "::1"),
			connect(1, "10.0.0.1:9000", ""),
			connect(1, "[::2]:9000", ""),
			lookup("10.0.0.1:9000", "127.0.0.6:7000", 2),
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
		Ops: []demuxtest.Op{
			bind("0.0.0.0:7100", demux.Options{ReuseAddr: true}),
			bind("0.0.0.0:7100", demux.Options{ReuseAddr: true}),
			connect(1, "10.0.0.2:6000", "0.0.0.0"),
			connect(0, "10.0.0.2:6000", "0.0.0.0"),
			lookup("10.0.0.2:6000", "127.0.0.1:7100", 1),
			lookup("10.0.0.3:6000", "127.0.0.1:7100", 1),
			connect(0, "10.0.0.2:6000", "::"),
			bind("[::]:7101", demux.Options{}),
			connect(7, "10.0.0.2:6000", "::ffff:0.0.0.0"),
			lookup("10.0.0.2:6000", "127.0.0.1:7101", 1),
			connect(7, "[::2]:6000", "::"),
			bind("[::]:7102", demux.Options{V6Only: true}),
			connect(11, "[::2]:6000", "::"),
			connect(11, "[::2]:6000", "0.0.0.0"),
			bind("127.0.0.9:7100", demux.Options{ReuseAddr: true, Device: 1}),
			connect(14, "10.0.0.2:6000", ""),
			lookup("10.0.0.2:6000", "127.0.0.9:7100", 1),
			connect(0, "10.0.0.2:6000", "127.0.0.9"),
			lookup("10.0.0.2:6000", "127.0.0.9:7100", 1),
		},
	},
	{
		// Disconnect and SetDevice (checked on Linux 6.18): a wildcard
		// gets its address back and is rehashed, a specific socket keeps
		// its place and first 4-tuple, the device is unbound; SetDevice
		// keeps the place; ReusePort sockets change group.
		Name: "disconnect and set device",
		Ops: []demuxtest.Op{
			bind("0.0.0.0:7200", demux.Options{ReuseAddr: true}),
			bind("0.0.0.0:7200", demux.Options{ReuseAddr: true}),
			connect(0, "127.0.0.1:6000", "127.0.0.1"),
			bind("0.0.0.0:7200", demux.Options{ReuseAddr: true}),
			disconnect(0),
			lookup("127.0.0.1:7000", "127.0.0.1:7200", 1),
			bind("127.0.0.1:7201", demux.Options{ReuseAddr: true}),
			bind("127.0.0.1:7201", demux.Options{ReuseAddr: true}),
			connect(6, "127.0.0.1:6000", ""),
			connect(7, "127.0.0.1:6000", ""),
			disconnect(6),
			lookup("127.0.0.1:6000", "127.0.0.1:7201", 1),
			connect(6, "127.0.0.1:6000", ""),
			lookup("127.0.0.1:6000", "127.0.0.1:7201", 1),
			bind("[fe80::1%2]:7202", demux.Options{}),
			connect(14, "[fe80::2%2]:6000", ""),
			disconnect(14),
			connect(14, "[::2]:6000", "fe80::1"),
			bind("0.0.0.0:7203", demux.Options{ReusePort: true}),
			bind("0.0.0.0:7203", demux.Options{ReusePort: true}),
			bind("0.0.0.0:7203", demux.Options{ReusePort: true, Device: 1}),
			setDevice(18, 1),
			setDevice(19, 2),
			lookup("127.0.0.1:7000", "127.0.0.1:7203", 1),
			lookup("127.0.0.1:7001", "127.0.0.1:7203", 2),
			closeSock(3),
			disconnect(3),
			setDevice(3, 1),
			// A disconnected socket has no 4-tuple precedence, though it
			// keeps its first 4-tuple: the device-bound socket scores more.
			bind("127.0.0.1:7204", demux.Options{ReuseAddr: true}),
			connect(28, "127.0.0.1:6000", ""),
			bind("127.0.0.1:7204", demux.Options{ReuseAddr: true, Device: 1}),
			disconnect(28),
			lookup("127.0.0.1:6000", "127.0.0.1:7204", 1),
		},
	},
}

// bind binds a socket to addrPort with the options o (their Addr and Port
// are set from addrPort).
func bind(addrPort string, o demux.Options) demuxtest.Op {
	ap := netip.MustParseAddrPort(addrPort)
	o.Addr, o.Port = ap.Addr(), ap.Port()
	return demuxtest.Op{Kind: demuxtest.Bind, Opts: o}
}

// connect connects the socket of op ref to remote, with local as the
// source address routing chose ("" for none).
func connect(ref int, remote, local string) demuxtest.Op {
	o := demuxtest.Op{Kind: demuxtest.Connect, Ref: ref, Remote: netip.MustParseAddrPort(remote)}
	if local != "" {
		o.Local = netip.MustParseAddr(local)
	}
	return o
}

// lookup looks up a datagram from src to dst that arrived on interface
// ifindex.
func lookup(src, dst string, ifindex int) demuxtest.Op {
	return demuxtest.Op{Kind: demuxtest.Lookup, Src: netip.MustParseAddrPort(src), Dst: netip.MustParseAddrPort(dst), Ifindex: ifindex}
}

func disconnect(ref int) demuxtest.Op { return demuxtest.Op{Kind: demuxtest.Disconnect, Ref: ref} }

func closeSock(ref int) demuxtest.Op { return demuxtest.Op{Kind: demuxtest.Close, Ref: ref} }

// setDevice binds the socket of op ref to interface ifindex.
func setDevice(ref, ifindex int) demuxtest.Op {
	return demuxtest.Op{Kind: demuxtest.SetDevice, Ref: ref, Ifindex: ifindex}
}
