// Package rows is the table of Linux UDP behaviours that udpdemux follows,
// as data: each row is a short sequence of binds, connects and datagrams
// with the outcome Linux 6.18 gives for each. The table's own tests
// (package demux) run the rows on every table configuration and on the
// reference model; the kernel conformance test runs them on real sockets.
// Row numbers are those of the semantics table in DESIGN.md.
//
// It is test support: nothing outside the module's tests imports it.
package rows

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Kind is what a step does.
type Kind uint8

const (
	// Bind binds the next socket; sockets are numbered from 0 in bind
	// order (only a row's last bind may fail).
	Bind Kind = iota
	// Connect connects socket Sock to Peer.
	Connect
	// Send sends a datagram from Peer to Dst on the loopback interface.
	Send
	// Spread sends Flows datagrams to Dst from Peer's address on as many
	// source ports, and checks that each flow always reaches the same
	// member of the SO_REUSEPORT group of sockets 0..Sock and that every
	// member gets some. It is about the table's flow hash, so only the
	// table's tests run it.
	Spread
)

// Peer names a remote endpoint; each test maps it to an address it can
// use (the kernel test to one of its peer sockets).
type Peer uint8

const (
	// P is an IPv4 peer that sockets connect to.
	P Peer = iota
	// Q is another IPv4 peer with P's address and another port.
	Q
	// P6 is an IPv6 peer on ::1.
	P6
	// Far4 is an IPv4 peer on another address than P, which an IPv6
	// socket reaches through its v4-mapped form.
	Far4
)

// Opts are a bind's options. Device true binds to the loopback interface.
type Opts struct {
	Addr      netip.Addr
	ReuseAddr bool
	ReusePort bool
	V6Only    bool
	Device    bool
}

// Step is one operation of a row.
type Step struct {
	Kind Kind
	Bind Opts // Bind
	Sock int  // Connect: the socket; Spread: the last group member
	Peer Peer // Connect, Send, Spread
	// Local is the source address routing picks for a connect; a table
	// takes it as Connect's local argument, the kernel chooses it itself.
	Local netip.Addr
	Dst   netip.Addr // Send, Spread
	Flows int        // Spread
	// Want is Linux's outcome: for Bind "ok", "EADDRINUSE" or "EINVAL";
	// for Connect "local <address>" as getsockname reports it; for Send
	// "s<n>" (socket n receives) or "none"; "" checks nothing.
	Want string
}

// Row is one row of the semantics table, or one variant of it.
type Row struct {
	Num     int
	Variant string // "" or what tells this variant from the row's others
	Name    string
	// Note says which of the reference model's clarifications, beyond
	// the row's own words, the outcome rests on.
	Note  string
	Steps []Step
}

// Label names the row and its variant, as in "4 (v6 first)".
func (r Row) Label() string {
	l := strconv.Itoa(r.Num)
	if r.Variant != "" {
		l += " (" + r.Variant + ")"
	}
	return l
}

// Needs6 reports whether the row needs IPv6 on loopback.
func (r Row) Needs6() bool {
	return slices.ContainsFunc(r.Steps, func(s Step) bool { return s.Kind == Bind && s.Bind.Addr.Is6() })
}

// WantSock returns the socket a Send step expects to receive its datagram,
// -1 for none.
func (s Step) WantSock() int {
	if s.Want == "none" {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimPrefix(s.Want, "s"))
	if err != nil || !strings.HasPrefix(s.Want, "s") {
		panic("rows: Send step wants " + strconv.Quote(s.Want))
	}
	return n
}

// Errno returns the errno a Bind step expects, 0 for success.
func (s Step) Errno() syscall.Errno {
	switch s.Want {
	case "ok":
		return 0
	case "EADDRINUSE":
		return syscall.EADDRINUSE
	case "EINVAL":
		return syscall.EINVAL
	}
	panic("rows: Bind step wants " + strconv.Quote(s.Want))
}

// bind parses "addr [reuseaddr] [reuseport] [v6only] [dev]".
func bind(spec, want string) Step {
	f := strings.Fields(spec)
	s := Step{Kind: Bind, Bind: Opts{Addr: netip.MustParseAddr(f[0])}, Want: want}
	for _, w := range f[1:] {
		switch w {
		case "reuseaddr":
			s.Bind.ReuseAddr = true
		case "reuseport":
			s.Bind.ReusePort = true
		case "v6only":
			s.Bind.V6Only = true
		case "dev":
			s.Bind.Device = true
		default:
			panic("rows: bad bind spec " + strconv.Quote(spec))
		}
	}
	return s
}

// connect connects sock to p from local; want is "local <address>".
func connect(sock int, p Peer, local, want string) Step {
	return Step{Kind: Connect, Sock: sock, Peer: p, Local: netip.MustParseAddr(local), Want: "local " + want}
}

// send sends from p to dst; want is "s<n>" or "none".
func send(p Peer, dst, want string) Step {
	return Step{Kind: Send, Peer: p, Dst: netip.MustParseAddr(dst), Want: want}
}

func row(num int, variant, name, note string, steps ...Step) Row {
	return Row{Num: num, Variant: variant, Name: name, Note: note, Steps: steps}
}

// then returns pre followed by more, in a new slice.
func then(pre []Step, more ...Step) []Step {
	return append(append([]Step(nil), pre...), more...)
}

// The starting points that several variants of a row share.
var (
	// dualConnected6 is a dual-stack "::" socket connected to an IPv6 peer.
	dualConnected6 = []Step{bind("::", "ok"), connect(0, P6, "::1", "::1")}
	// dualConnected4 is a dual-stack "::" socket connected to an IPv4 peer.
	dualConnected4 = []Step{bind("::", "ok"), connect(0, Far4, "127.0.0.1", "::ffff:127.0.0.1")}
	// wildConnected is a 0.0.0.0 socket connected from 127.0.0.1.
	wildConnected = []Step{bind("0.0.0.0", "ok"), connect(0, P, "127.0.0.1", "127.0.0.1")}
)

// eleven binds 127.0.0.1 to 127.0.0.11: one more socket than the hybrid
// strategy scans in the primary chain.
func eleven() []Step {
	var s []Step
	for i := 1; i <= 11; i++ {
		s = append(s, bind("127.0.0."+strconv.Itoa(i), "ok"))
	}
	return s
}

// eitherOrder is a row in two variants, which bind a and b (labelled la and
// lb) in both orders; P's datagram to dst must reach the socket bound as a.
func eitherOrder(num int, name, la, a, lb, b, dst string) []Row {
	return []Row{
		row(num, la+" first", name, "", bind(a, "ok"), bind(b, "ok"), send(P, dst, "s0")),
		row(num, lb+" first", name, "", bind(b, "ok"), bind(a, "ok"), send(P, dst, "s1")),
	}
}

// thenEach is a row with one variant for each last bind: the steps pre,
// then that bind. A last bind is its spec and its outcome; the spec labels
// the variant.
func thenEach(num int, name, note string, pre []Step, last ...[2]string) []Row {
	var rs []Row
	for _, l := range last {
		rs = append(rs, row(num, l[0], name, note, then(pre, bind(l[0], l[1]))...))
	}
	return rs
}

// All are the rows, in order. Where a row's sockets must share a port at
// all, they set SO_REUSEADDR.
var All = slices.Concat(
	[]Row{
		row(1, "", "both ReuseAddr on 127.0.0.1: the newest receives", "",
			bind("127.0.0.1 reuseaddr", "ok"), bind("127.0.0.1 reuseaddr", "ok"), send(P, "127.0.0.1", "s1")),
		row(2, "", "0.0.0.0 connected to the sender beats 127.0.0.1", "connect takes the local address routing chose",
			bind("127.0.0.1 reuseaddr", "ok"), bind("0.0.0.0 reuseaddr", "ok"), connect(1, P, "127.0.0.1", "127.0.0.1"),
			send(P, "127.0.0.1", "s1"), send(Q, "127.0.0.1", "s0")),
		row(3, "", "connected 127.0.0.1 gets its peer, the other the rest", "",
			bind("127.0.0.1 reuseaddr", "ok"), connect(0, P, "127.0.0.1", "127.0.0.1"), bind("127.0.0.1 reuseaddr", "ok"),
			send(P, "127.0.0.1", "s0"), send(Q, "127.0.0.1", "s1")),
	},
	eitherOrder(4, "v4 0.0.0.0 beats v6 :: for IPv4", "v4", "0.0.0.0 reuseaddr", "v6", ":: reuseaddr", "127.0.0.1"),
	eitherOrder(5, "device-bound 0.0.0.0 beats unbound 0.0.0.0", "device", "0.0.0.0 reuseaddr dev", "unbound", "0.0.0.0 reuseaddr", "127.0.0.1"),
	eitherOrder(6, "127.0.0.1 beats device-bound 0.0.0.0", "127.0.0.1", "127.0.0.1 reuseaddr", "device", "0.0.0.0 reuseaddr dev", "127.0.0.1"),
	eitherOrder(7, "v6 ::ffff:127.0.0.1 beats v4 0.0.0.0", "mapped", "::ffff:127.0.0.1 reuseaddr", "v4", "0.0.0.0 reuseaddr", "127.0.0.1"),
	eitherOrder(8, "v4 127.0.0.1 beats v6 ::ffff:127.0.0.1", "v4", "127.0.0.1 reuseaddr", "mapped", "::ffff:127.0.0.1 reuseaddr", "127.0.0.1"),
	[]Row{
		row(9, "", ":: V6Only gets no IPv4 datagram, but IPv6 ones", "",
			bind(":: v6only", "ok"), send(P, "127.0.0.1", "none"), send(P, "::ffff:127.0.0.1", "none"), send(P6, "::1", "s0")),
		row(10, "", "a connected socket gets nothing from another peer", "",
			bind("127.0.0.1", "ok"), connect(0, P, "127.0.0.1", "127.0.0.1"), send(Q, "127.0.0.1", "none"), send(P, "127.0.0.1", "s0")),
		row(11, "", "4 ReusePort sockets share 20 flows, each flow stable", "the table's hash, seeded from a fixed Rand",
			bind("127.0.0.1 reuseport", "ok"), bind("127.0.0.1 reuseport", "ok"), bind("127.0.0.1 reuseport", "ok"), bind("127.0.0.1 reuseport", "ok"),
			Step{Kind: Spread, Sock: 3, Peer: P, Dst: netip.MustParseAddr("127.0.0.1"), Flows: 20}),
		row(12, "", ":: dual-stack, then 0.0.0.0", "", bind("::", "ok"), bind("0.0.0.0", "EADDRINUSE")),
		row(13, "", ":: V6Only, then 0.0.0.0", "", bind(":: v6only", "ok"), bind("0.0.0.0", "ok")),
		row(14, "", ":: dual-stack, then 127.0.0.1", "", bind("::", "ok"), bind("127.0.0.1", "EADDRINUSE")),
		row(15, "", "127.0.0.1, then :: dual-stack", "", bind("127.0.0.1", "ok"), bind("::", "EADDRINUSE")),
	},
	thenEach(16, "127.0.0.1, then a v4-mapped address", "", []Step{bind("127.0.0.1", "ok")},
		[2]string{"::ffff:127.0.0.1", "EADDRINUSE"}, [2]string{"::ffff:127.0.0.2", "ok"}),
	[]Row{row(17, "", "::1, then ::", "", bind("::1", "ok"), bind("::", "EADDRINUSE"))},
	thenEach(18, "ReusePort 127.0.0.1, then ReusePort again", "same owner", []Step{bind("127.0.0.1 reuseport", "ok")},
		[2]string{"127.0.0.1 reuseport", "ok"}, [2]string{"0.0.0.0 reuseport", "ok"}),
	[]Row{row(19, "", "ReuseAddr, then no ReuseAddr on the same address", "",
		bind("127.0.0.1 reuseaddr", "ok"), bind("127.0.0.1", "EADDRINUSE"))},
	thenEach(20, "0.0.0.0 on lo, then 0.0.0.0 without device or on lo", "", []Step{bind("0.0.0.0 dev", "ok")},
		[2]string{"0.0.0.0", "EADDRINUSE"}, [2]string{"0.0.0.0 dev", "EADDRINUSE"}),
	[]Row{
		row(21, "", "11 sockets on 127.0.0.1…11, then 0.0.0.0", "", then(eleven(), bind("0.0.0.0", "EADDRINUSE"))...),
		row(22, "", "V6Only on ::ffff:127.0.0.1", "", bind("::ffff:127.0.0.1 v6only", "EINVAL")),
		row(23, "", "::1 without V6Only, then 0.0.0.0", "", bind("::1", "ok"), bind("0.0.0.0", "ok")),
	},
	thenEach(24, ":: connected to ::1, then another bind", "the IPv4 side keeps the placeholder 127.0.0.6, which overlaps 0.0.0.0 only",
		dualConnected6, [2]string{"0.0.0.0", "EADDRINUSE"}, [2]string{"127.0.0.1", "ok"}, [2]string{"::", "EADDRINUSE"}),
	thenEach(25, ":: connected to an IPv4 peer from 127.0.0.1, then another bind", "the socket's address becomes ::ffff:127.0.0.1",
		dualConnected4, [2]string{"127.0.0.1", "EADDRINUSE"}, [2]string{"127.0.0.2", "ok"}, [2]string{"::1", "ok"}),
	thenEach(26, "0.0.0.0 connected from 127.0.0.1, then another bind", "",
		wildConnected, [2]string{"127.0.0.1", "EADDRINUSE"}, [2]string{"127.0.0.2", "ok"}),
)

// Count is the number of rows (not variants) in All.
const Count = 26
