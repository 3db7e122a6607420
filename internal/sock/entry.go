package sock

import (
	"net/netip"
	"sync/atomic"
)

// Flag bits of an Entry.
const (
	ReuseAddr uint8 = 1 << iota // SO_REUSEADDR
	ReusePort                   // SO_REUSEPORT
	V6Only                      // IPV6_V6ONLY (set by the kernel on a specific IPv6 bind)
	Connected                   // a remote address is set
	HasV4                       // the socket answers IPv4 datagrams at V4
	HasV6                       // the socket answers IPv6 datagrams at V6
	Is6                         // AF_INET6 socket
)

// Addr16 is an address in its 16-byte form, as two big-endian halves, so that
// comparisons are two integer compares. IPv4 addresses use the v4-mapped form.
type Addr16 struct{ Hi, Lo uint64 }

// Wild6 is the IPv6 unspecified address "::".
var Wild6 Addr16

// Wild4 is 0.0.0.0 in 16-byte form (::ffff:0.0.0.0).
var Wild4 = Addr16{Lo: 0xffff << 32}

// From16 returns the 16-byte form of a. IPv4 addresses become v4-mapped.
func From16(a netip.Addr) Addr16 {
	b := a.As16()
	return Addr16{Hi: be64(b[:8]), Lo: be64(b[8:])}
}

// IsMapped reports whether x is a v4-mapped address (::ffff:a.b.c.d).
func (x Addr16) IsMapped() bool { return x.Hi == 0 && x.Lo>>32 == 0xffff }

// V4 returns the low 32 bits: the IPv4 address of a v4-mapped x.
func (x Addr16) V4() uint32 { return uint32(x.Lo) }

// Map4 returns the v4-mapped 16-byte form of the IPv4 address v4.
func Map4(v4 uint32) Addr16 { return Addr16{Lo: 0xffff<<32 | uint64(v4)} }

func be64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// Node links an Entry into one chain. Next is read without locks by
// lookups; Prev is used only by writers holding the chain's slot lock.
type Node struct {
	Next atomic.Pointer[Node]
	Prev *Node  // guarded by the slot lock
	E    *Entry // the Entry this node belongs to; immutable
}

// Entry is one published state of a bound socket. Every field but the
// nodes' links is immutable after the Entry is linked into a chain.
type Entry struct {
	N1 Node // link in the primary (port) chain
	N2 Node // link in the secondary (address, port) chain

	Port   uint16
	Flags  uint8
	Device int32
	Owner  uint32

	// V4 is the IPv4 address the socket answers on (0: any), when HasV4.
	// For an IPv6 socket it is Linux's sk_rcv_saddr: the mapped address,
	// 0 for a dual-stack "::", or 127.0.0.6 once a dual-stack socket has
	// connected to an IPv6 peer.
	V4 uint32
	// V6 is the IPv6 local address (Wild6: any), when HasV6.
	V6 Addr16
	// Key is the address the secondary table hashes this entry under.
	Key Addr16
	// AddrHash is the secondary hash of Key, before the port is mixed in.
	AddrHash uint32

	Remote     Addr16 // when Connected; IPv4 peers in v4-mapped form
	RemotePort uint16

	// Seq orders entries for ties: larger is more recently bound.
	Seq uint64

	// Group is the SO_REUSEPORT group of an unconnected ReusePort entry.
	Group *Group

	// Local and Peer are the addresses as the socket reports them.
	Local netip.Addr
	Peer  netip.AddrPort

	// Sock is the socket this entry is a state of.
	Sock *Socket
}

// Has reports whether all of the flag bits f are set.
func (e *Entry) Has(f uint8) bool { return e.Flags&f == f }

// Socket is the stable identity of a bound socket across its states.
// Cur and Closed change only under the socket's primary slot lock; they are
// atomic so that the socket's owner can read them at any time. Lookups
// never read them.
type Socket struct {
	Cur    atomic.Pointer[Entry] // the published entry, or the last one once closed
	Closed atomic.Bool
	Owner  any // the public handle that wraps this socket; immutable
}

// ValidSlots reports whether n is an allowed table size: a power of two
// from MinSlots to MaxSlots.
func ValidSlots(n int) bool { return n >= MinSlots && n <= MaxSlots && n&(n-1) == 0 }

// Table size limits (Linux: uhash_entries).
const (
	MinSlots = 256
	MaxSlots = 65536
)
