package demux

import (
	"fmt"
	"math"
	"net/netip"
	"syscall"

	"github.com/udpdemux/udpdemux/grow"
	"github.com/udpdemux/udpdemux/internal/sock"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lockorder"
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
	s := &Socket[V]{t: t, val: v, opts: o}
	r := &ref[V]{Ref: sock.Ref{Sock: &s.s}, val: v}
	e := &sock.Entry{Face: sock.Face{Port: o.Port, Device: int32(o.Device), Ref: &r.Ref}, Owner: o.Owner}
	setLocal(e, l)
	if l.Device != 0 {
		e.Device = int32(l.Device)
		s.opts.Device = l.Device
	}
	if o.ReuseAddr {
		e.Flags |= sock.ReuseAddr
	}
	if o.ReusePort {
		e.Flags |= sock.ReusePort
	}
	s.opts.V6Only = e.Has(sock.V6Only)

	var h held
	if err := t.lockBind(&h, e); err != nil {
		return nil, opError("bind", o, err)
	}
	s.opts.Port = e.Port
	// Port event 0→1, before publication; a veto leaves the table as is.
	if err := t.occ.Claim(e.Port); err != nil {
		t.unlock(&h)
		return nil, opError("bind", s.opts, err)
	}
	e.Seq = t.seq.Add(1)
	s.s.Bound, s.s.BindSeq = e.Seq, e.Seq
	// The handle is complete before the entry is published: a lookup may
	// return it the moment it is linked.
	s.s.Cur.Store(e)
	if h.pr != nil {
		t.g.Link(h.pr, e)
	} else {
		t.link(e, &h.g)
	}
	t.unlock(&h)
	t.n.Add(1)
	return s, nil
}

// held is the lock a write holds on its port: a primary slot of the fixed
// tables, or a port record of the growing ones.
type held struct {
	g  lockorder.Guard
	pr *grow.Port
}

// lockPort locks port's slot or record.
func (t *Table[V]) lockPort(h *held, port uint16) {
	if t.g != nil {
		h.pr = t.g.LockPort(port)
	} else {
		t.tabs.H1.LockPort(&h.g, port)
	}
}

// unlock releases what h holds.
func (t *Table[V]) unlock(h *held) {
	if h.pr != nil {
		t.g.Unlock(h.pr)
		h.pr = nil
	} else {
		h.g.Unlock()
	}
}

// lockBind locks the port e binds to, after checking it for conflicts or,
// for port 0, choosing one; on failure it holds nothing.
func (t *Table[V]) lockBind(h *held, e *sock.Entry) error {
	switch {
	case e.Port != 0 && t.g != nil:
		h.pr = t.g.LockPort(e.Port)
		t.stats.bindCheck(true)
		if t.g.InUse(h.pr, e) {
			t.unlock(h)
			return syscall.EADDRINUSE
		}
	case e.Port != 0:
		t.tabs.H1.LockPort(&h.g, e.Port)
		inUse, secondary := t.check.InUse(e)
		t.stats.bindCheck(secondary)
		if inUse {
			h.g.Unlock()
			return syscall.EADDRINUSE
		}
	case t.g != nil:
		if h.pr = t.g.Ephemeral(e, &t.ports); h.pr == nil {
			return errNoPort
		}
	case !t.ephemeralPort(e, &h.g):
		return errNoPort
	}
	return nil
}

var errNoPort = fmt.Errorf("no free ephemeral port for this socket: %w", syscall.EADDRINUSE)

// ephemeralPort chooses e's port with the configured algorithm; on success
// g holds the port's primary slot lock.
func (t *Table[V]) ephemeralPort(e *sock.Entry, g *lockorder.Guard) bool {
	switch t.ephemeral {
	case EphemeralBitmap:
		return t.eph.Bitmap(e, g)
	case EphemeralLinear:
		return t.eph.Linear(e, g)
	}
	return t.eph.Index(e, g)
}

// setLocal copies the local side l into e.
func setLocal(e *sock.Entry, l ipv6.Local) {
	const addrFlags = sock.Is6 | sock.V6Only | sock.HasV4 | sock.HasV6
	e.Flags = e.Flags&^addrFlags | l.Flags
	e.V4, e.V6 = l.V4, l.V6
}

// localOf returns e's local side.
func localOf(e *sock.Entry) ipv6.Local {
	const addrFlags = sock.Is6 | sock.V6Only | sock.HasV4 | sock.HasV6
	return ipv6.Local{Flags: e.Flags & addrFlags, V4: e.V4, V6: e.V6}
}

// link publishes a new entry e in both tables. g holds e's primary slot.
func (t *Table[V]) link(e *sock.Entry, g *lockorder.Guard) {
	i := t.tabs.H2.IndexOf(e)
	s2 := t.tabs.H2.At(i)
	if e.Has(sock.ReusePort) && !e.Has(sock.Connected) {
		e.Group = findGroup(s2.Chain.First(), e)
		if e.Group == nil {
			e.Group = new(sock.Group)
		}
		e.Group.Add(e)
	}
	t.tabs.H2.Lock(g, i)
	s2.Chain.PushFront(&e.N2)
	t.tabs.H1.Slot(e.Port).Chain.PushFront(&e.N1)
	t.occ.Add(e)
}

// findGroup returns the SO_REUSEPORT group that e joins: that of an
// unconnected ReusePort socket with the same address, port, device, family,
// V6Only and owner, other than e's own socket. All such sockets share e's
// secondary slot, and the caller's primary slot lock keeps them in place.
func findGroup(n *sock.Node, e *sock.Entry) *sock.Group {
	const key = sock.Is6 | sock.V6Only | sock.ReusePort | sock.Connected
	for ; n != nil; n = n.Next.Load() {
		x := sock.OfSecondary(n)
		if x.Group != nil && x.Sock() != e.Sock() && x.Port == e.Port && x.Flags&key == e.Flags&key &&
			x.V4 == e.V4 && x.V6 == e.V6 && x.Device == e.Device && x.Owner == e.Owner {
			return x.Group
		}
	}
	return nil
}

// Connect connects s to remote. A socket bound to a wildcard address takes
// local, the source address routing chose for remote (the table has no
// routing table), as its local address, and counts as the most recently
// bound socket for ties; for a socket bound to a specific address, local
// must be the zero Addr or that address. When routing finds no source
// address (a device without an address of the peer's family), pass the
// unspecified address (0.0.0.0, or "::" for an IPv6 peer): as in Linux, a
// connect to an IPv4 peer then keeps the wildcard, and the socket receives
// its peer's datagrams to any address, without the 4-tuple precedence of
// connected sockets until a connect gives it a source address; a connect
// to an IPv6 peer fails with EADDRNOTAVAIL. Connecting again changes the
// peer. Errors wrap syscall.EBADF for a closed socket, and EINVAL,
// EAFNOSUPPORT, ENETUNREACH or EADDRNOTAVAIL as Linux's connect returns
// them; the table is then unchanged.
func (t *Table[V]) Connect(s *Socket[V], remote netip.AddrPort, local netip.Addr) error {
	var h held
	old, err := t.lockOpen(&h, s, "connect")
	defer t.unlock(&h)
	if err != nil {
		return err
	}
	l, peer, err := ipv6.Connect(localOf(old), int(old.Device), remote, local, t.zones)
	if err != nil {
		return s.opError("connect", err)
	}
	e := &sock.Entry{
		Face: sock.Face{
			Port: old.Port, Flags: old.Flags | sock.Connected, Device: old.Device,
			Seq: old.Seq, Ref: old.Ref, Remote: peer.Addr, RemotePort: peer.Port,
		},
		Owner: old.Owner, Peer4: old.Peer4,
	}
	setLocal(e, l)
	if peer.Device != 0 {
		e.Device = int32(peer.Device)
	}
	if e.Remote.IsMapped() && e.Has(sock.Is6) {
		e.Peer4 = e.Remote.V4()
	}
	t.order(e, old)
	t.replace(&h, s, old, e)
	return nil
}

// replace publishes e, a new state of s, in place of old, its current one:
// as s's current entry, then in either storage. old leaves its SO_REUSEPORT
// group; an unconnected ReusePort e joins the group of its new address and
// device (a new one if there is none), as its last member. e's Seq and
// flags are the caller's. h holds the port, which a new entry never
// changes.
func (t *Table[V]) replace(h *held, s *Socket[V], old, e *sock.Entry) {
	join := e.Has(sock.ReusePort) && !e.Has(sock.Connected)
	if join {
		if h.pr != nil {
			e.Group = t.g.GroupOf(h.pr, e)
		} else if e.Group = findGroup(t.tabs.H2.At(t.tabs.H2.IndexOf(e)).Chain.First(), e); e.Group == nil {
			e.Group = new(sock.Group)
		}
	}
	// As in Bind: a lookup that finds the new entry sees it as current.
	s.s.Cur.Store(e)
	if join {
		e.Group.Add(e)
	}
	if h.pr != nil {
		t.g.Replace(h.pr, old, e)
		return
	}
	t.rehash(old, e, &h.g)
	t.tabs.H1.Slot(e.Port).Chain.Replace(&old.N1, &e.N1)
	if old.Group != nil {
		old.Group.Remove(old)
	}
	t.occ.Remove(old)
	t.occ.Add(e)
}

// order sets e's tie-break order and its Hash4 flag after a connect that
// replaces old. A connect that changes the local address's hash key
// rehashes the socket, which makes it the most recently bound (one that
// keeps a wildcard, "::" becoming ::ffff:0.0.0.0, stays where it was). The
// first connect with a source address also puts the socket in Linux's
// 4-tuple hash, where later connects leave it: the entry keeps 4-tuple
// precedence while its 4-tuple is that one. The caller holds the socket's
// primary slot lock.
func (t *Table[V]) order(e, old *sock.Entry) {
	sk := e.Sock()
	if e.Key() != old.Key() {
		sk.BindSeq = t.seq.Add(1)
	}
	now := sock.Tuple{Local: e.V6, Remote: e.Remote, LocalPort: e.Port, RemotePort: e.RemotePort}
	// A socket that kept its wildcard is not in the 4-tuple hash.
	if sk.First4 == nil && !e.IsWild() {
		first := now
		first.Seq = t.seq.Add(1)
		sk.First4 = &first
	}
	if f := sk.First4; f != nil {
		if now.Seq = f.Seq; now == *f {
			e.Flags |= sock.Hash4
			e.Seq = f.Seq
			return
		}
	}
	e.Flags &^= sock.Hash4
	e.Seq = sk.BindSeq
}

// rehash replaces old by e in the secondary table, moving it to another
// slot if its key changed. A move publishes e in its new slot before it
// unlinks old, inside a sequence count of both slots, so a lookup that
// searched the new slot before the move and the old one after it notices
// and searches again.
func (t *Table[V]) rehash(old, e *sock.Entry, g *lockorder.Guard) {
	h2 := t.tabs.H2
	oi, ni := h2.IndexOf(old), h2.IndexOf(e)
	os, ns := h2.At(oi), h2.At(ni)
	h2.Lock2(g, oi, ni)
	if oi == ni {
		os.Chain.Replace(&old.N2, &e.N2)
		return
	}
	os.Seq.Begin()
	ns.Seq.Begin()
	ns.Chain.PushFront(&e.N2)
	os.Chain.Remove(&old.N2)
	ns.Seq.End()
	os.Seq.End()
}

// lockOpen locks the port of s through h and returns its current entry,
// or an EBADF error for op if s is closed or of another table (then h may
// hold nothing).
func (t *Table[V]) lockOpen(h *held, s *Socket[V], op string) (*sock.Entry, error) {
	if s == nil || s.t != t {
		return nil, &OpError{Op: op, Err: errForeign}
	}
	t.lockPort(h, s.opts.Port)
	if s.s.Closed.Load() {
		return nil, s.opError(op, syscall.EBADF)
	}
	return s.s.Cur.Load(), nil
}

var errForeign = fmt.Errorf("socket of another table: %w", syscall.EBADF)

// Close unbinds s. Closing a closed socket fails with an error wrapping
// syscall.EBADF.
func (t *Table[V]) Close(s *Socket[V]) error {
	var h held
	e, err := t.lockOpen(&h, s, "close")
	defer t.unlock(&h)
	if err != nil {
		return err
	}
	if h.pr != nil {
		t.g.Unlink(h.pr, e)
		s.s.Closed.Store(true)
		t.occ.Release(e.Port) // port event 1→0, after unlinking
		t.n.Add(-1)
		return nil
	}
	g := &h.g
	port := e.Port
	i := t.tabs.H2.IndexOf(e)
	s2 := t.tabs.H2.At(i)
	t.tabs.H2.Lock(g, i)
	s2.Chain.Remove(&e.N2)
	t.tabs.H1.Slot(port).Chain.Remove(&e.N1)
	if e.Group != nil {
		e.Group.Remove(e)
	}
	t.occ.Remove(e)
	s.s.Closed.Store(true)
	t.occ.Release(port) // port event 1→0, after unlinking
	t.n.Add(-1)
	return nil
}
