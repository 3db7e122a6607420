package demux

import (
	"net/netip"
	"strconv"

	"github.com/udpdemux/udpdemux/lookup"
)

// Socket is a bound socket, the handle that Bind returns and Lookup finds.
// It stays valid after Close, which makes it inert: its methods still
// report its last addresses, and table operations on it fail with EBADF.
// Its methods are safe for concurrent use. The zero Socket belongs to no
// table: it reports zero addresses and table operations on it fail with
// EBADF.
type Socket[V any] struct {
	s lookup.Socket
	h *home[V]
	// addr is the address the socket was bound to, as given, in 16-byte
	// form: a connect replaces a wildcard in the socket's entries, which
	// do not keep the form it was given in either. s.Opts says that
	// form, h its zone. Its value, port, owner and device are its current
	// entry's. A handle that kept them, and the address as a netip.Addr,
	// took 96 bytes, and then 80; it now takes 64.
	addr lookup.Addr16
}

// home is a socket's table, with the zone of the address it was bound to
// and, for a link-local address, the interface it is scoped to: the
// sockets bound to other addresses share their table's, so that a handle
// keeps one pointer for all three.
type home[V any] struct {
	t     *Table[V]
	zone  string
	scope int
}

// The bits of lookup.Socket.Opts: the flags a socket was bound with, as
// Linux leaves them, and whether its address was given as IPv4.
const (
	optReuseAddr uint8 = 1 << iota
	optReusePort
	optV6Only
	optAddr4
)

// table returns the socket's table: nil for the zero Socket, and for a
// nil one.
func (s *Socket[V]) table() *Table[V] {
	if s == nil || s.h == nil {
		return nil
	}
	return s.h.t
}

// setBound records what s keeps of the options o it is bound with in t,
// with V6Only as Linux leaves it (v6only), and scope, the interface its
// link-local address is scoped to (0: none).
func (s *Socket[V]) setBound(t *Table[V], o Options, v6only bool, scope int) {
	s.h = &t.home
	if z := o.Addr.Zone(); z != "" || scope != 0 {
		s.h = &home[V]{t: t, zone: z, scope: scope}
	}
	s.addr = lookup.Addr16Of(o.Addr)
	s.s.Opts = flagIf(o.Addr.Is4(), optAddr4) | flagIf(o.ReuseAddr, optReuseAddr) |
		flagIf(o.ReusePort, optReusePort) | flagIf(v6only, optV6Only)
}

// flagIf returns the flag f if on is set, else 0.
func flagIf(on bool, f uint8) uint8 {
	if on {
		return f
	}
	return 0
}

// boundAddr returns the address s was bound to, as given.
func (s *Socket[V]) boundAddr() netip.Addr {
	if s.s.Opts&optAddr4 != 0 {
		return s.addr.Addr(true)
	}
	return s.addr.Addr(false).WithZone(s.h.zone)
}

// eventAddr returns the address s was bound to as Config.OnAddr reports
// it: as given, but for a link-local address with the index of the
// interface it is scoped to as zone, which a later connect, disconnect or
// SetDevice does not change.
func (s *Socket[V]) eventAddr(port uint16) netip.AddrPort {
	a := s.boundAddr()
	if s.h.scope != 0 {
		a = a.WithZone(strconv.Itoa(s.h.scope))
	}
	return netip.AddrPortFrom(a, port)
}

// options returns the Options of s, whose entry is e.
func (s *Socket[V]) options(e *lookup.Entry) Options {
	f := s.s.Opts
	return Options{
		Addr: s.boundAddr(), Port: e.Port, Owner: e.Owner, Device: int(e.Device),
		ReuseAddr: f&optReuseAddr != 0,
		ReusePort: f&optReusePort != 0,
		V6Only:    f&optV6Only != 0,
	}
}

// Value returns the value attached to the socket at Bind.
func (s *Socket[V]) Value() V {
	if e := s.s.Cur.Load(); e != nil {
		return s.h.t.value(&e.Ref)
	}
	return *new(V)
}

// Options returns the options the socket was bound with, with Port set to
// the port it got, V6Only as Linux leaves it, and Device as it is now: a
// link-local address's zone, or a connect to a link-local peer, binds the
// device.
func (s *Socket[V]) Options() Options {
	if e := s.s.Cur.Load(); e != nil {
		return s.options(e)
	}
	return Options{}
}

// LocalAddr returns the local address and port. A socket bound to a
// wildcard address reports the source address it took when it connected.
func (s *Socket[V]) LocalAddr() netip.AddrPort {
	e := s.s.Cur.Load()
	if e == nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(e.LocalAddr(), e.Port)
}

// RemoteAddr returns the peer's address, or the zero AddrPort if the
// socket is not connected.
func (s *Socket[V]) RemoteAddr() netip.AddrPort {
	if e := s.s.Cur.Load(); e != nil {
		return e.Peer()
	}
	return netip.AddrPort{}
}

// Closed reports whether the socket was closed.
func (s *Socket[V]) Closed() bool { return s.s.Closed.Load() }

// Connected reports whether the socket has a peer.
func (s *Socket[V]) Connected() bool {
	e := s.s.Cur.Load()
	return e != nil && e.Has(lookup.Connected)
}

// Connect connects the socket to remote; see Table.Connect, which it
// calls on the socket's table.
func (s *Socket[V]) Connect(remote netip.AddrPort, local netip.Addr) error {
	return s.table().Connect(s, remote, local)
}

// Close unbinds the socket; see Table.Close, which it calls on the
// socket's table.
func (s *Socket[V]) Close() error { return s.table().Close(s) }
