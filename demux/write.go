package demux

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"syscall"

	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// Bind binds a socket with the given options and attaches v to it. Port 0
// chooses an ephemeral port. Errors wrap syscall.EADDRINUSE when the
// address is in use (or, for port 0, no port is free for this socket),
// syscall.EADDRNOTAVAIL when Config.IsLocal denies the address, and
// syscall.EINVAL for bad options; the table is then unchanged.
func (t *Table[V]) Bind(o Options, v V) (*Socket[V], error) {
	if o.Device < 0 || o.Device > math.MaxInt32 {
		return nil, opError("bind", o, fmt.Errorf("device %d: %w", o.Device, syscall.EINVAL))
	}
	l, err := ipv6.Bind(o.Addr, o.V6Only, o.Device, t.zones)
	if err == nil {
		err = t.checkLocal(o.Addr, max(o.Device, l.Device))
	}
	if err != nil {
		return nil, opError("bind", o, err)
	}
	s := new(Socket[V])
	s.setBound(t, o, l.Flags&lookup.V6Only != 0, l.Device)
	// l.Device, a link-local address's interface, is o.Device if that is
	// set: ipv6.Bind refuses another.
	e := &lookup.Entry{Face: lookup.Face{Port: o.Port, Device: int32(max(o.Device, l.Device)), Ref: t.newRef(&s.s, v)}, Owner: o.Owner}
	l.SetOn(e)
	e.Flags |= flagIf(o.ReuseAddr, lookup.ReuseAddr) | flagIf(o.ReusePort, lookup.ReusePort)

	if err := t.w.bind(s, e, o); err != nil {
		return nil, err
	}
	return s, nil
}

// bind binds e, s's first entry: it checks e's port for conflicts or, for
// port 0, chooses one, then claims the port and publishes e. o are the
// options as the caller gave them, for errors. For port 0, a hook's veto
// that wraps EADDRINUSE (the port is taken outside the table, such as on
// the host whose kernel sockets serve the table) makes it choose again,
// up to hostPortTries ports.
func (w *writes[V, P, E]) bind(s *Socket[V], e *lookup.Entry, o Options) error {
	for try := 1; ; try++ {
		err, vetoed := w.bindOnce(s, e, o)
		if o.Port != 0 || !vetoed || try == hostPortTries || !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
	}
}

// hostPortTries is how many ports bind(0) tries when the port events'
// hooks find the ports it chose taken.
const hostPortTries = 8

// bindOnce is one try of bind; vetoed reports that a port event's hook
// refused the port.
func (w *writes[V, P, E]) bindOnce(s *Socket[V], e *lookup.Entry, o Options) (_ error, vetoed bool) {
	t := w.t
	var h P
	if o.Port != 0 {
		h = w.e.LockPort(e.Port)
	} else if h = w.e.Ephemeral(e); h == *new(P) {
		return opError("bind", o, errNoPort), false
	}
	// Deferred, so that an OnPort hook that panics in Claim leaves the
	// port unlocked: nothing is published before Claim returns, so the
	// bind is undone when its panic reaches the caller.
	defer w.e.Unlock(h)
	if o.Port != 0 {
		inUse, indexed := w.e.InUse(h, e)
		t.stats.bindCheck(indexed)
		if inUse {
			return opError("bind", o, syscall.EADDRINUSE), false
		}
	}
	// Port event 0→1, before publication; a veto leaves the table as is.
	if err := t.occ.Claim(e.Port); err != nil {
		return opError("bind", s.options(e), err), true
	}
	if err := t.claimAddr(s, e.Port); err != nil {
		return opError("bind", s.options(e), err), true
	}
	e.Seq = t.seq.Add(1)
	s.s.Bound, s.s.BindSeq = e.Seq, e.Seq
	// The handle is complete before the entry is published: a lookup may
	// return it the moment it is linked.
	s.s.Cur.Store(e)
	w.e.Link(h, e)
	t.occ.Add(e)
	return nil, false
}

var errNoPort = fmt.Errorf("no free ephemeral port for this socket: %w", syscall.EADDRINUSE)

// Connect connects s to remote. A socket bound to a wildcard address takes
// local, the source address routing chose for remote (the table has no
// routing table), as its local address, and counts as the most recently
// bound socket for ties; for a socket bound to a specific address, local
// must be the zero Addr or that address.
//
// What the caller passes follows what its routing found. A route with a
// source address: pass that address, even one that belongs to another
// device than the route's (Linux lends an IPv6 source from any device
// unless the route's device has use_oif_addrs_only, and an IPv4 one of
// global scope). A route without a source address (a device without an
// address of the peer's family, and nothing to lend): pass the unspecified
// address (0.0.0.0, or "::" for an IPv6 peer); as in Linux, a connect to
// an IPv4 peer then keeps the wildcard, and the socket receives its
// peer's datagrams to any address, without the 4-tuple precedence of
// connected sockets until a connect gives it a source address, and a
// connect to an IPv6 peer fails with EADDRNOTAVAIL. No route at all:
// Linux's connect fails with ENETUNREACH before the socket changes, and so
// does the caller's, without calling Connect, since the table cannot tell
// that case from the others. Connecting again changes the peer. Errors wrap syscall.EBADF for a closed socket, and EINVAL,
// EAFNOSUPPORT, ENETUNREACH or EADDRNOTAVAIL as Linux's connect returns
// them; the table is then unchanged.
func (t *Table[V]) Connect(s *Socket[V], remote netip.AddrPort, local netip.Addr) error {
	if err := t.owns(s, "connect"); err != nil {
		return err
	}
	return t.w.connect(s, remote, local)
}

// connect is Connect for a socket of the table.
func (w *writes[V, P, E]) connect(s *Socket[V], remote netip.AddrPort, local netip.Addr) error {
	t := w.t
	return w.onOpen(s, "connect", func(h P, old *lookup.Entry) error {
		l, peer, err := ipv6.Connect(ipv6.LocalOf(old), int(old.Device), remote, local, t.zones)
		if err != nil {
			return s.opError("connect", err)
		}
		e := l.Connected(old, peer)
		lookup.Order(e, old, &t.seq)
		w.replace(h, s, old, e)
		return nil
	})
}

// replace publishes e, a new state of s, in place of old, its current one:
// as s's current entry, then in the storage. old leaves its SO_REUSEPORT
// group; an unconnected ReusePort e joins the group of its new address and
// device (a new one if there is none), as its last member. e's Seq and
// flags are the caller's. h holds the port, which a new entry never
// changes.
func (w *writes[V, P, E]) replace(h P, s *Socket[V], old, e *lookup.Entry) {
	join := e.Has(lookup.ReusePort) && !e.Has(lookup.Connected)
	if join {
		e.Group = w.e.GroupOf(h, e)
	}
	// As in Bind: a lookup that finds the new entry sees it as current.
	s.s.Cur.Store(e)
	s.s.Pass(old, e)
	if join {
		e.Group.Add(e)
	}
	w.e.Replace(h, old, e)
	w.t.occ.Remove(old)
	w.t.occ.Add(e)
}

// owns returns an EBADF error for op unless s is a socket of t. t is nil
// when a Socket's method finds it in no table: the zero Socket, or a nil
// one.
func (t *Table[V]) owns(s *Socket[V], op string) error {
	if t == nil || s.table() != t {
		return &OpError{Op: op, Err: errForeign}
	}
	return nil
}

var errForeign = fmt.Errorf("socket of another table: %w", syscall.EBADF)

// errClosed is the error of an operation on a closed socket: EBADF, as
// Linux's system calls return it, and net.ErrClosed, which Go code that
// serves a net.PacketConn checks for to end its loops.
var errClosed = fmt.Errorf("%w (%w)", syscall.EBADF, net.ErrClosed)

// onOpen locks the port of s, a socket of the table, and returns what f
// returns given the handle and s's current entry, or an EBADF error for
// op if s is closed; it unlocks the port after f, even if f panics.
func (w *writes[V, P, E]) onOpen(s *Socket[V], op string, f func(h P, cur *lookup.Entry) error) error {
	h := w.e.LockPort(s.s.Cur.Load().Port) // every entry of s has its port
	defer w.e.Unlock(h)
	if s.s.Closed.Load() {
		return s.opError(op, errClosed)
	}
	return f(h, s.s.Cur.Load())
}

// Close unbinds s. Closing a closed socket fails with an error wrapping
// syscall.EBADF and net.ErrClosed.
func (t *Table[V]) Close(s *Socket[V]) error {
	if err := t.owns(s, "close"); err != nil {
		return err
	}
	return t.w.close(s)
}

// close is Close for a socket of the table.
func (w *writes[V, P, E]) close(s *Socket[V]) error {
	t := w.t
	return w.onOpen(s, "close", func(h P, e *lookup.Entry) error {
		w.e.Unlink(h, e)
		s.s.Closed.Store(true)
		// Counted out before the port event, so that an OnPort hook that
		// panics finds the close complete: the socket is gone, and Len and
		// Verify agree with the tables.
		t.occ.Remove(e)
		// Port event 1→0, after unlinking and after the address event,
		// deferred so that it follows an OnAddr that panics too.
		defer t.occ.Release(e.Port)
		if t.onAddr != nil {
			_ = t.onAddr(s.eventAddr(e.Port), s.s.Opts&optV6Only != 0, false)
		}
		return nil
	})
}

// claimAddr tells OnAddr, if set, that s is about to be bound on port,
// with port's lock held. If OnAddr vetoes or panics, the port event that
// Claim may have made is undone, since the bind does not happen.
func (t *Table[V]) claimAddr(s *Socket[V], port uint16) error {
	if t.onAddr == nil {
		return nil
	}
	ok := false
	defer func() {
		if !ok {
			t.occ.Release(port)
		}
	}()
	err := t.onAddr(s.eventAddr(port), s.s.Opts&optV6Only != 0, true)
	ok = err == nil
	return err
}
