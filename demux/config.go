package demux

import (
	mrand "math/rand/v2"
	"net/netip"
)

// Config configures a Table. The zero value is a good default.
type Config struct {
	// Slots selects the storage. 0, the default, makes tables that grow
	// and shrink with the sockets they hold, with a 4-tuple table for
	// connected sockets and bind checks that do not scan shared ports
	// (DESIGN.md, "Storage engines"). A power of two from 256 to 65536
	// makes Linux's design instead: a port table and an (address, port)
	// table of that many slots each, fixed for the table's life, kept to
	// compare the two designs; bind(0) algorithms other than
	// EphemeralIndex need it.
	Slots int
	// Threshold is the primary chain length above which Hybrid searches
	// the secondary table: 0 means 10 (Linux's value); it must not be
	// negative. The growing tables' lookups follow it; their bind checks
	// scan a port of up to 64 sockets and read the port's summary past
	// that (Stats counts them as primary and secondary), whatever the
	// threshold, since the summary costs memory a scan of a few does not.
	Threshold int
	// Strategy selects the lookup and bind-check strategy (default Hybrid).
	Strategy Strategy
	// Ephemeral selects the bind(0) algorithm (default EphemeralIndex).
	Ephemeral Ephemeral
	// PortLow and PortHigh bound the ephemeral range, inclusive (Linux
	// ip_local_port_range). Both 0 means 32768–60999; otherwise
	// 1 ≤ PortLow ≤ PortHigh.
	PortLow, PortHigh uint16
	// ReservedPorts are never chosen by bind(0) (Linux
	// ip_local_reserved_ports); explicit binds to them work.
	ReservedPorts []uint16
	// Rand is the random source for ephemeral ports and the hash seeds;
	// nil means math/rand/v2's top-level generator (ChaCha8, seeded by the
	// runtime from the system's entropy, drawn from without a lock). The
	// Table serializes its calls to a Rand it is given. A typed nil is EINVAL. A source that is
	// not random (a constant, in tests) never makes bind(0) hang, but
	// makes its choices and the hash seeds predictable.
	Rand mrand.Source
	// FlowSeed, if not 0, seeds the flow hash that spreads datagrams over
	// the members of an SO_REUSEPORT group, instead of a seed drawn from
	// Rand. Tables (in other processes or on other hosts) with the same
	// FlowSeed send a flow to the member at the same position of groups
	// with the same members in the same order. It seeds nothing else: the
	// secondary table's seed and the ephemeral ports stay random, so one
	// who learns FlowSeed can neither predict ports nor aim datagrams at
	// one secondary slot. Linux has no such setting (its flow hash is
	// seeded at boot); a shared seed is what a fleet of user-space stacks
	// behind one load balancer needs.
	FlowSeed uint64
	// ZoneIndex maps an IPv6 zone to an interface index; nil accepts
	// decimal indexes only ("fe80::1%2" is interface 2).
	ZoneIndex func(zone string) (int, error)
	// IsLocal, if set, says whether addr is an address of this host as
	// seen from device (the socket's interface index, 0 for none), and
	// Bind fails with EADDRNOTAVAIL, before looking at the port, for an
	// address it denies. It is not asked about the wildcards, multicast
	// addresses or 255.255.255.255, which Linux always lets bind; a
	// v4-mapped address comes as its IPv4 address, without zone. It
	// should accept what the host's local routing table types local or
	// broadcast: on Linux 6.18, with 10.0.0.1/24 on eth0, 10.0.0.1 and
	// 10.0.0.255 but not 10.0.0.0; every 127/8 address; a global IPv6
	// address whatever the device; a link-local or loopback one only on
	// its own interface (::1 is not local on eth0). Nil accepts every
	// address, as Linux does for a socket with IP_FREEBIND.
	IsLocal func(addr netip.Addr, device int) bool
	// CountPaths makes every lookup count the path it took, for
	// Stats().Lookups. It is off by default because the count is a write
	// to memory that all cores share: with it, lookups on two cores slow
	// each other down (DESIGN.md, "Costs", says how it was measured).
	CountPaths bool
	// OnPort, if set, hears when a port comes into use and goes out of
	// use, so that a caller can keep something per port in step with the
	// table, such as the kernel socket that receives its datagrams.
	//
	// OnPort(port, true) is called when a bind is about to put the first
	// socket on a port: after the conflict check, before the socket is
	// published, so a lookup never finds a socket on a port whose event
	// has not been delivered. A non-nil error vetoes that bind, which
	// fails with an *OpError wrapping it and leaves the table unchanged.
	// bind(0) fails too, unless the error wraps syscall.EADDRINUSE: the
	// port is then taken outside the table (for a table served from
	// kernel sockets, by another program on the host), and bind(0)
	// chooses another, up to 8 ports in all, as Linux's bind(0) finds a
	// port that no socket of the host holds.
	// OnPort(port, false) is called after the last socket of a port was
	// closed and can no longer be found; its error is ignored. Connect
	// changes no port and calls neither.
	//
	// A port's events come in order, alternating, under the port's lock
	// (with fixed Slots, a lock that also covers the ports sharing its
	// primary slot): OnPort must not bind, connect or close sockets of the
	// table nor iterate its Sockets, which would deadlock. Lookups, Ports
	// and Len are safe: a lookup takes a port's lock only while writers
	// keep moving that port's sockets, which none can while OnPort holds
	// it. A panic in OnPort reaches the
	// caller of Bind or Close with the table consistent (see "Callbacks
	// that panic" in the package documentation).
	OnPort func(port uint16, inUse bool) error
	// OnAddr, if set, hears of the local address of every socket that
	// binds and of every socket that closes, so that a caller can keep
	// something per address in step with the table, such as kernel
	// sockets bound to the addresses the table's sockets use and no
	// others. local is the address as the bind gave it (v4-mapped form
	// kept), with the port the socket got; a link-local IPv6 address
	// has as zone the decimal index of the interface it is scoped to,
	// from its zone or Options.Device. v6Only is true for a socket that
	// receives no IPv4 (IPV6_V6ONLY, or a specific IPv6 address), which
	// tells whether "::" receives IPv4 too.
	//
	// OnAddr(local, v6Only, true) is called for every bind, after the
	// conflict check and after OnPort(port, true) where that is called,
	// before the socket is published; a non-nil error vetoes the bind as
	// OnPort's does (OnPort(port, false) then follows if OnPort(port,
	// true) preceded). OnAddr(local, v6Only, false) is called after the
	// socket was closed and can no longer be found, with what its bind
	// reported, before OnPort(port, false); its error is ignored. Connect
	// and Disconnect call neither: a socket receives only datagrams to an
	// address that its bind covers, whatever local address a connect gave
	// it. The locking rules of OnPort apply, and so does what a panic
	// does, with OnPort's event undone for a bind whose OnAddr panics.
	OnAddr func(local netip.AddrPort, v6Only, bound bool) error
}

// DefaultThreshold is the hybrid rule's primary chain length (Linux: 10).
const DefaultThreshold = 10

// Strategy selects how lookups and explicit-port bind checks search the
// tables. All strategies give the same answers; they differ in cost. Only
// benchmarks and tests need anything but Hybrid.
type Strategy uint8

const (
	// Hybrid is Linux 2.6.33's rule: search the secondary table when the
	// port's primary chain holds more than Config.Threshold sockets, unless
	// the secondary slot is longer than the primary one; else scan the
	// primary chain.
	Hybrid Strategy = iota
	// OnePhase always scans the port's primary chain.
	OnePhase
	// TwoPhase always searches the exact-address secondary slot, then the
	// wildcard one.
	TwoPhase
)

// String returns the strategy's name.
func (s Strategy) String() string {
	return nameOf(s, "strategy(?)", "hybrid", "one-phase", "two-phase")
}

// Ephemeral selects the bind(0) algorithm.
type Ephemeral uint8

const (
	// EphemeralIndex picks uniformly among the ports of the range that no
	// socket uses, from an occupancy index, and fails at once when every
	// port holds a socket that blocks any new one. When every port is in
	// use but some may be shared (SO_REUSEADDR, other addresses), it falls
	// back to EphemeralBitmap.
	EphemeralIndex Ephemeral = iota
	// EphemeralBitmap is Linux's algorithm since 2.6.30: from a random
	// primary chain, scan each chain once into a bitmap of the ports in
	// conflict, and walk that chain's ports by an odd multiple of the table
	// size.
	EphemeralBitmap
	// EphemeralLinear is the algorithm before the 2009 fix: probe port
	// after port, rescanning the chain for each. For benchmarks only.
	EphemeralLinear
)

// String returns the algorithm's name.
func (e Ephemeral) String() string {
	return nameOf(e, "ephemeral(?)", "index", "bitmap", "linear")
}

// nameOf returns names[v], the name of the constant v of an enumeration
// that counts from 0, or unknown for a value past them.
func nameOf[T ~uint8](v T, unknown string, names ...string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return unknown
}
