package demux

import (
	"net/netip"

	"github.com/udpdemux/udpdemux/internal/sock"
)

// Socket is a bound socket, the handle that Bind returns and Lookup finds.
// It stays valid after Close, which makes it inert: its methods still
// report its last addresses, and table operations on it fail with EBADF.
// Its methods are safe for concurrent use. The zero Socket belongs to no
// table: it reports zero addresses and table operations on it fail with
// EBADF.
type Socket[V any] struct {
	s    sock.Socket
	val  V // next to s, which a lookup's entry points at
	t    *Table[V]
	opts Options // as bound, with the port chosen; immutable
}

// Value returns the value attached to the socket at Bind.
func (s *Socket[V]) Value() V { return s.val }

// Options returns the options the socket was bound with, with Port set to
// the port it got, V6Only as Linux leaves it, and Device as it is now: a
// link-local address's zone, or a connect to a link-local peer, binds the
// device.
func (s *Socket[V]) Options() Options {
	o := s.opts
	if e := s.s.Cur.Load(); e != nil {
		o.Device = int(e.Device)
	}
	return o
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
	return e != nil && e.Has(sock.Connected)
}

// Connect connects the socket to remote; see Table.Connect, which it
// calls on the socket's table.
func (s *Socket[V]) Connect(remote netip.AddrPort, local netip.Addr) error {
	if s == nil || s.t == nil {
		return &OpError{Op: "connect", Err: errForeign}
	}
	return s.t.Connect(s, remote, local)
}

// Close unbinds the socket; see Table.Close, which it calls on the
// socket's table.
func (s *Socket[V]) Close() error {
	if s == nil || s.t == nil {
		return &OpError{Op: "close", Err: errForeign}
	}
	return s.t.Close(s)
}
