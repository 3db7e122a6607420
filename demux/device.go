package demux

import (
	"fmt"
	"math"
	"syscall"

	"github.com/udpdemux/udpdemux/lookup"
)

// SetDevice binds s to interface device (0: none) after Bind, as
// SO_BINDTODEVICE on a bound socket does in Linux: from then on s receives
// only datagrams that arrive on device, and later binds see it on device.
// Following Linux 6.18, nothing is checked against other sockets, the
// socket keeps its peer and its place for ties, and a socket bound to a
// link-local address may change or drop the interface its zone named.
//
// Like the kernel, which rehashes the socket even when the device does not
// change, SetDevice moves a socket that is in the 4-tuple hash (it once
// connected with a source address) at another 4-tuple than its current one
// to its current 4-tuple, as the most recent entry there: a connected socket gains 4-tuple precedence for its
// current peer, over sockets that connected to that peer before; a
// disconnected one loses it for good, since a later connect does not put
// a socket already in the 4-tuple hash there again.
//
// An SO_REUSEPORT socket leaves its group; unlike Linux, which leaves it
// in no group, it then joins the group of sockets with the same address,
// port and new device, if any, as its last member (deliberate difference
// 6). The other options are fixed at Bind: Linux refuses IPV6_V6ONLY on a
// bound socket, and SO_REUSEADDR and SO_REUSEPORT set after bind matter
// only to later binds, which udpdemux does not model.
//
// Errors wrap syscall.EINVAL for a negative device or one above
// math.MaxInt32, and EBADF for a closed socket or one of another table;
// the table is then unchanged.
func (t *Table[V]) SetDevice(s *Socket[V], device int) error {
	if err := t.owns(s, "setdevice"); err != nil {
		return err
	}
	return t.w.setDevice(s, device)
}

// setDevice checks device once it knows s is open: a closed socket is
// EBADF whatever the device.
func (w *writes[V, P, E]) setDevice(s *Socket[V], device int) error {
	return w.onOpen(s, "setdevice", func(h P, old *lookup.Entry) error {
		if device < 0 || device > math.MaxInt32 {
			return s.opError("setdevice", fmt.Errorf("device %d: %w", device, syscall.EINVAL))
		}
		f, in4 := s.s.First4()
		move := in4 && lookup.TupleOf(old).With(f.Seq) != f
		if int(old.Device) == device && !move {
			return nil // no 4-tuple to move, and the group stays the same
		}
		e := &lookup.Entry{Face: old.Face, Peer4: old.Peer4, Owner: old.Owner}
		e.Device = int32(device)
		e.Group = nil // replace finds the group of the new device
		if move {
			// The socket, in the 4-tuple hash at another 4-tuple, moves to
			// e's, as the newest there (Linux's udp_lib_rehash on
			// SO_BINDTODEVICE; a socket whose 4-tuple is unchanged stays in
			// its slot and keeps its order). A connected e takes the 4-tuple
			// precedence for its peer; an unconnected one has none, and the
			// socket keeps its place in the 4-tuple hash all the same, so that
			// a later connect does not take precedence.
			f = lookup.TupleOf(e)
			f.Seq = w.t.seq.Add(1)
			s.s.MoveFirst4(f)
			lookup.Place4(e, f, true)
		}
		w.replace(h, s, old, e)
		return nil
	})
}

// SetDevice binds the socket to interface device after Bind; see
// Table.SetDevice, which it calls on the socket's table.
func (s *Socket[V]) SetDevice(device int) error { return s.table().SetDevice(s, device) }
