package demux

import (
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// Disconnect returns s to unconnected, as connect with AF_UNSPEC does in
// Linux; it succeeds on an unconnected socket too. Following the kernel:
//
//   - The peer is forgotten, in both families. (Linux forgets an IPv6
//     socket's peer address only in part: its IPv6 lookups go on accepting
//     datagrams from that address alone, which udpdemux does not copy:
//     deliberate difference 7.)
//   - A socket bound to 0.0.0.0 or "::" gets that wildcard back in place
//     of the source address its connect took (a dual-stack "::" socket
//     also drops the 127.0.0.6 placeholder and receives IPv4 again). It is
//     rehashed, so it counts as the most recently bound socket for ties; it
//     leaves the 4-tuple hash, and a later connect is a first connect
//     again.
//   - A socket bound to a specific address (::ffff:0.0.0.0 included) keeps
//     its local address and its place; it is not rehashed, and it stays in
//     the 4-tuple hash at the 4-tuple of its first connect, so that a later
//     connect to that 4-tuple regains that connect's precedence, unless a
//     SetDevice moved it in between (see SetDevice).
//   - The device is unbound, whether a connect to a link-local peer, a
//     zone or Options.Device bound it: Linux 6.18 clears SO_BINDTODEVICE
//     too. No bind conflict is checked: sockets that coexisted because
//     their devices differed go on coexisting, as in Linux.
//   - An SO_REUSEPORT socket joins the group of its address, port and
//     device again, as its last member. Linux (6.13 onwards) took it out
//     of its group at its connect and does not put it back, so that flows
//     go to whichever socket a lookup meets first (deliberate difference 6).
//
// Unlike Linux, a socket that got its port from bind(0) keeps it
// (deliberate difference 5): the kernel unbinds such a socket's port on
// disconnect and binds a new one on the next send, which a table without
// sends cannot do; Close and Bind again for that.
//
// Errors wrap syscall.EBADF for a closed socket or one of another table;
// the table is then unchanged.
func (t *Table[V]) Disconnect(s *Socket[V]) error {
	if err := t.owns(s, "disconnect"); err != nil {
		return err
	}
	return t.w.disconnect(s)
}

// disconnect is Disconnect for a socket of the table.
func (w *writes[V, P, E]) disconnect(s *Socket[V]) error {
	return w.onOpen(s, "disconnect", func(h P, old *lookup.Entry) error {
		e := &lookup.Entry{
			Face:  lookup.Face{Port: old.Port, Flags: old.Flags &^ (lookup.Connected | lookup.Hash4), Ref: old.Ref},
			Owner: old.Owner,
		}
		l := ipv6.LocalOf(old)
		wild := s.boundAddr().IsUnspecified()
		if wild {
			// The wildcard bound once, so binding it again cannot fail.
			l, _ = ipv6.Bind(s.boundAddr(), s.s.Opts&optV6Only != 0, 0, nil)
		}
		l.SetOn(e)
		if e.Flags == old.Flags && e.V4 == old.V4 && e.V6 == old.V6 && old.Device == 0 {
			return nil // unconnected and unbound to a device: nothing changes
		}
		sk := e.Sock()
		if e.Key() != old.Key() {
			sk.BindSeq = w.t.seq.Add(1)
		}
		if wild {
			sk.ForgetFirst4()
		}
		e.Seq = sk.BindSeq
		w.replace(h, s, old, e)
		return nil
	})
}

// Disconnect returns the socket to unconnected; see Table.Disconnect,
// which it calls on the socket's table.
func (s *Socket[V]) Disconnect() error { return s.table().Disconnect(s) }
