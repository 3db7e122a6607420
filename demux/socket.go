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
	s sock.Socket
	t *Table[V]
	// opts is what the socket's entries do not keep of its bind. Its
	// value, port, owner and device are its current entry's: a handle
	// that kept them too took 96 bytes, where it now takes 80 (with a
	// value of up to 8 bytes; a larger one is kept once, not twice).
	opts bound
}

// bound is what a socket's entries do not keep of the Options it was
// bound with: the address as given (a connect replaces a wildcard, and a
// zone is kept only as a device), and the flags as Linux leaves them.
// Immutable once the socket is bound.
type bound struct {
	addr  netip.Addr
	flags uint8 // optReuseAddr, optReusePort, optV6Only
}

const (
	optReuseAddr uint8 = 1 << iota
	optReusePort
	optV6Only
)

func boundOf(o Options) bound {
	b := bound{addr: o.Addr}
	if o.ReuseAddr {
		b.flags |= optReuseAddr
	}
	if o.ReusePort {
		b.flags |= optReusePort
	}
	if o.V6Only {
		b.flags |= optV6Only
	}
	return b
}

// options returns the Options of a socket bound with b whose entry is e.
func (b bound) options(e *sock.Entry) Options {
	return Options{
		Addr: b.addr, Port: e.Port, Owner: e.Owner, Device: int(e.Device),
		ReuseAddr: b.flags&optReuseAddr != 0,
		ReusePort: b.flags&optReusePort != 0,
		V6Only:    b.flags&optV6Only != 0,
	}
}

// Value returns the value attached to the socket at Bind.
func (s *Socket[V]) Value() V {
	if e := s.s.Cur.Load(); e != nil {
		return s.t.value(&e.Ref)
	}
	return *new(V)
}

// Options returns the options the socket was bound with, with Port set to
// the port it got, V6Only as Linux leaves it, and Device as it is now: a
// link-local address's zone, or a connect to a link-local peer, binds the
// device.
func (s *Socket[V]) Options() Options {
	if e := s.s.Cur.Load(); e != nil {
		return s.opts.options(e)
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
