package lookup

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"sync/atomic"
	"unsafe"
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
	// Hash4 marks a connected entry that Linux (6.13 onwards) finds
	// through its 4-tuple hash: one whose 4-tuple is the socket's place
	// there (that of its first connect with a source address, or the one a
	// SetDevice moved it to). It beats every other candidate on an exact
	// 4-tuple match, whatever their scores.
	Hash4
)

// Addr16 is an address in its 16-byte form, as two big-endian halves, so that
// comparisons are two integer compares. IPv4 addresses use the v4-mapped form.
type Addr16 struct{ Hi, Lo uint64 }

// Wild6 is the IPv6 unspecified address "::".
var Wild6 Addr16

// Wild4 is 0.0.0.0 in 16-byte form (::ffff:0.0.0.0).
var Wild4 = Addr16{Lo: 0xffff << 32}

// Addr16Of returns the 16-byte form of a. IPv4 addresses become v4-mapped.
func Addr16Of(a netip.Addr) Addr16 {
	if a.Is4() {
		b := a.As4()
		return Map4(binary.BigEndian.Uint32(b[:]))
	}
	b := a.As16()
	return Addr16{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}
}

// IsMapped reports whether x is a v4-mapped address (::ffff:a.b.c.d).
func (x Addr16) IsMapped() bool { return x.Hi == 0 && x.Lo>>32 == 0xffff }

// V4 returns the low 32 bits: the IPv4 address of a v4-mapped x.
func (x Addr16) V4() uint32 { return uint32(x.Lo) }

// Map4 returns the v4-mapped 16-byte form of the IPv4 address v4.
func Map4(v4 uint32) Addr16 { return Addr16{Lo: 0xffff<<32 | uint64(v4)} }

// Node links an Entry into one chain. Next is read without locks by
// lookups; Prev is used only by writers holding the chain's slot lock. A
// node is embedded in its Entry, which Of finds again.
type Node struct {
	Next atomic.Pointer[Node]
	Prev *Node // guarded by the slot lock
}

// Face is what a lookup reads of an entry: the fields a datagram is
// scored on, and what a winner leads to. It holds no links, so that an
// index may keep a copy of it beside the entry's pointer and score that,
// sparing a load of the entry.
type Face struct {
	Port       uint16
	Flags      uint8
	RemotePort uint16
	Device     int32
	// V4 is the IPv4 address the socket answers on (0: any), when HasV4.
	// For an IPv6 socket it is Linux's sk_rcv_saddr: the mapped address,
	// 0 for a dual-stack "::", or 127.0.0.6 once a dual-stack socket has
	// connected to an IPv6 peer.
	V4 uint32
	// V6 is the IPv6 local address (Wild6: any) of an IPv6 socket; for an
	// IPv4 socket, V4 in mapped form.
	V6 Addr16
	// Group is the SO_REUSEPORT group of an unconnected ReusePort entry.
	Group *Group

	// Ref is what a lookup returns, held here by value so that a lookup
	// that scores this Face has its answer without a further load. Every state of one socket has
	// the same Ref.
	Ref Ref
	// Seq orders entries for ties: larger is more recently bound (or
	// rehashed by a connect). For a Hash4 entry it is the socket's order
	// in the 4-tuple hash instead (its first connect's, or its last
	// SetDevice's that moved it), which is how Linux orders its 4-tuple
	// chains.
	Seq    uint64
	Remote Addr16 // when Connected; IPv4 peers in v4-mapped form
}

// Sock returns the socket f is a state of.
func (f *Face) Sock() *Socket { return f.Ref.Sock }

// Ref is what a lookup returns: a socket, and the value its owner attached
// to it, in whichever of two words the table's value type fits (see
// package demux, which alone knows the type). Two entries are states of
// one socket exactly when their Refs' Socks are equal, which a scan can
// test without a load.
type Ref struct {
	Sock *Socket
	// Ptr is a value that is one pointer, or a pointer to a copy of a
	// value that fits neither Ptr nor Word.
	Ptr unsafe.Pointer
	// Word is a value of at most 8 bytes without pointers.
	Word uint64
}

// Entry is one published state of a bound socket. Every field but the
// nodes' links is immutable after the Entry is linked into a chain.
//
// Entries are 128 bytes, two cache lines. The first holds the primary
// link and all that a primary-chain lookup of an unconnected socket
// scores, with the socket it leads to; the second holds the rest of the
// Ref, the tie order, the peer and the secondary link.
type Entry struct {
	N1 Node // link in the primary (port) chain
	Face
	// Peer4 is Linux's inet_daddr of an IPv6 socket: the IPv4 address of
	// its last IPv4 (v4-mapped) peer, which a later connect to an IPv6 peer
	// leaves in place. Only the placeholder fallback reads it.
	Peer4 uint32
	Owner uint32 // the uid stand-in for ReusePort
	N2    Node   // link in the secondary (address, port) chain
}

// offN2 is the offset of N2 in an Entry.
const offN2 = unsafe.Offsetof(Entry{}.N2)

// OfPrimary returns the Entry whose primary link (N1) n is.
func OfPrimary(n *Node) *Entry { return (*Entry)(unsafe.Pointer(n)) }

// OfSecondary returns the Entry whose secondary link (N2) n is.
func OfSecondary(n *Node) *Entry { return (*Entry)(unsafe.Add(unsafe.Pointer(n), -int(offN2))) }

// Link says which of an entry's links a chain goes through: OfPrimary or
// OfSecondary.
type Link func(*Node) *Entry

// KeyOf returns the secondary-table key of a local side with the given
// flags and addresses: "::" hashes as 0.0.0.0, an IPv4 or v4-mapped
// address as its mapped form, any other IPv6 address as itself.
func KeyOf(flags uint8, v4 uint32, v6 Addr16) Addr16 {
	if flags&Is6 == 0 {
		return Map4(v4)
	}
	if v6 == Wild6 {
		return Wild4
	}
	return v6
}

// Key returns the address e is hashed under in the secondary table.
func (e *Entry) Key() Addr16 { return KeyOf(e.Flags, e.V4, e.V6) }

// IsWild reports whether e is bound to a wildcard address.
func (e *Entry) IsWild() bool { return e.Key() == Wild4 }

// Addr returns the 16-byte address x as a netip.Addr: IPv4 if is4, else
// IPv6 (a v4-mapped x stays v4-mapped).
func (x Addr16) Addr(is4 bool) netip.Addr {
	if is4 {
		v := x.V4()
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], x.Hi)
	binary.BigEndian.PutUint64(b[8:], x.Lo)
	return netip.AddrFrom16(b)
}

// LocalAddr returns e's local address as the socket reports it, with the
// device as zone for a link-local IPv6 address.
func (e *Entry) LocalAddr() netip.Addr {
	a := e.V6.Addr(!e.Has(Is6))
	if e.Device != 0 && a.Is6() && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast()) {
		a = a.WithZone(strconv.Itoa(int(e.Device)))
	}
	return a
}

// Peer returns e's remote address and port, or the zero AddrPort if e is
// not connected.
func (e *Entry) Peer() netip.AddrPort {
	if !e.Has(Connected) {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(e.Remote.Addr(!e.Has(Is6)), e.RemotePort)
}

// Has reports whether all of the flag bits f are set.
func (e *Entry) Has(f uint8) bool { return e.Flags&f == f }

// Socket is the stable identity of a bound socket across its states. The
// public handle embeds it as its first field, so that a lookup can return
// the handle from an Entry without a pointer chase of its own.
// Cur and Closed change only under the socket's primary slot lock; they are
// atomic so that the socket's owner can read them at any time. Lookups
// never read them.
type Socket struct {
	Cur    atomic.Pointer[Entry] // the published entry, or the last one once closed
	Closed atomic.Bool
	// first4Own says what first4 points to; see First4. It and Opts fill
	// what would be padding, which keeps the public handle in its size
	// class.
	first4Own bool
	// Opts is the public handle's: what it keeps of the options its
	// socket was bound with. Immutable once the socket is published.
	Opts uint8

	// Bound is the Seq of the socket's bind: its place in the port's
	// primary chain, which no connect changes. Immutable once the socket
	// is published.
	Bound uint64
	// BindSeq is the Seq of the socket's last bind or rehash. Guarded by
	// the socket's primary slot lock.
	BindSeq uint64
	// first4 holds the socket's place in Linux's 4-tuple hash: the 4-tuple
	// of its first connect with a source address (a later connect does not
	// move it; a SetDevice does, to the socket's 4-tuple then), with its
	// order there: nil until then; while the current entry has that 4-tuple, that
	// entry, so that a socket that connects once pays nothing for it; a
	// Tuple of the socket's own (first4Own) once it has left it. Both
	// guarded by the socket's primary slot lock.
	first4 unsafe.Pointer
}

// First4 returns the socket's place in the 4-tuple hash (the 4-tuple of its
// first connect, unless MoveFirst4 moved it), and whether it has one. The caller holds the socket's primary slot lock.
func (s *Socket) First4() (Tuple, bool) {
	switch {
	case s.first4 == nil:
		return Tuple{}, false
	case s.first4Own:
		return *(*Tuple)(s.first4), true
	}
	return TupleOf((*Entry)(s.first4)), true
}

// holdFirst4 makes e, a new state of the socket whose 4-tuple and Seq are
// those of its first connect, what holds them. The caller holds the
// socket's primary slot lock.
func (s *Socket) holdFirst4(e *Entry) { s.first4, s.first4Own = unsafe.Pointer(e), false }

// MoveFirst4 makes t the socket's place in the 4-tuple hash, as Linux's
// rehash of a hashed socket does. The caller holds the socket's primary
// slot lock.
func (s *Socket) MoveFirst4(t Tuple) { s.first4, s.first4Own = unsafe.Pointer(&t), true }

// ForgetFirst4 drops the first 4-tuple. The caller holds the socket's
// primary slot lock.
func (s *Socket) ForgetFirst4() { s.first4, s.first4Own = nil, false }

// Pass is told that e replaced old as the socket's current state. If old
// held the first 4-tuple, e holds it when e's 4-tuple and Seq are the
// same, and the socket keeps a copy of its own otherwise: an entry the
// socket has left never stays reachable from it. The caller holds the
// socket's primary slot lock.
func (s *Socket) Pass(old, e *Entry) {
	if s.first4Own || s.first4 != unsafe.Pointer(old) {
		return
	}
	if t := TupleOf(old); TupleOf(e) != t {
		s.first4, s.first4Own = unsafe.Pointer(&t), true
		return
	}
	s.first4 = unsafe.Pointer(e)
}

// TupleOf returns e's 4-tuple, with e's Seq as its order.
func TupleOf(e *Entry) Tuple {
	return Tuple{local: e.V6, remote: e.Remote, localPort: e.Port, remotePort: e.RemotePort, Seq: e.Seq}
}

// Tuple is a connected socket's 4-tuple, as the 4-tuple hash saw it.
type Tuple struct {
	local, remote         Addr16
	localPort, remotePort uint16
	Seq                   uint64 // order of the first connect
}

// ValidSlots reports whether n is an allowed table size: a power of two
// from MinSlots to MaxSlots.
func ValidSlots(n int) bool { return n >= MinSlots && n <= MaxSlots && n&(n-1) == 0 }

// Table size limits (Linux: uhash_entries).
const (
	MinSlots = 256
	MaxSlots = 65536
)
