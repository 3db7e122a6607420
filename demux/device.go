package demux

import (
	"fmt"
	"math"
	"syscall"

	"github.com/udpdemux/udpdemux/internal/sock"
)

// SetDevice binds s to interface device (0: none) after Bind, as
// SO_BINDTODEVICE on a bound socket does in Linux: from then on s receives
// only datagrams that arrive on device, and later binds see it on device.
// Following Linux 6.18, nothing is checked against other sockets, the
// socket keeps its place for ties and its peer and 4-tuple precedence, and
// a socket bound to a link-local address may change or drop the interface
// its zone named. An SO_REUSEPORT socket leaves its group (Linux detaches
// it); unlike Linux, it then joins the group of sockets with the same
// address, port and new device, if any, as its last member, since in
// udpdemux every unconnected ReusePort socket belongs to the group of its
// key. The other options are fixed at Bind: Linux refuses IPV6_V6ONLY on a
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
	h, old, err := w.lockOpen(s, "setdevice")
	defer w.e.Unlock(h)
	if err != nil {
		return err
	}
	if device < 0 || device > math.MaxInt32 {
		return s.opError("setdevice", fmt.Errorf("device %d: %w", device, syscall.EINVAL))
	}
	if int(old.Device) == device {
		return nil
	}
	e := &sock.Entry{Face: old.Face, Peer4: old.Peer4, Owner: old.Owner}
	e.Device = int32(device)
	e.Group = nil // replace finds the group of the new device
	w.replace(h, s, old, e)
	return nil
}

// SetDevice binds the socket to interface device after Bind; see
// Table.SetDevice, which it calls on the socket's table.
func (s *Socket[V]) SetDevice(device int) error {
	if s == nil || s.table() == nil {
		return &OpError{Op: "setdevice", Err: errForeign}
	}
	return s.h.t.SetDevice(s, device)
}
