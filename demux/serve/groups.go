package serve

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
)

// sockKey names the kernel sockets of one local address and port: the
// wildcard of a family (0.0.0.0, "::"), or, with Options.PerAddress, an
// address that the table's sockets are bound to, a link-local one with
// its interface index as zone.
type sockKey struct {
	port uint16
	addr netip.Addr
}

// sockGroup are the kernel sockets of one key: the first, which sends,
// joins groups and delivers multicast and broadcast, then the other
// readers' (Options.Readers), which only read unicast. users counts the
// reasons to keep them: the port's event in the default mode, the
// table's sockets bound to the address with PerAddress.
type sockGroup[V any] struct {
	ls    []*listener[V]
	users int
}

var (
	any4 = netip.IPv4Unspecified()
	any6 = netip.IPv6Unspecified()
)

// keysOf returns the keys of the kernel sockets through which a table
// socket bound to addr (as Config.OnAddr gives it: a link-local address
// with its interface index as zone) with v6Only receives, on port: one
// per family it receives, the zero Addr for a family it does not.
// Without PerAddress they are the wildcards.
func (s *Server[V]) keysOf(port uint16, addr netip.Addr, v6Only bool) (k4, k6 sockKey) {
	k4.port, k6.port = port, port
	switch {
	case addr.Is4() || addr.Is4In6():
		k4.addr = addr.Unmap()
	case addr.IsUnspecified():
		k6.addr = any6
		if !v6Only {
			k4.addr = any4
		}
	default:
		k6.addr = addr
	}
	if !s.opts.PerAddress {
		if k4.addr.IsValid() {
			k4.addr = any4
		}
		if k6.addr.IsValid() {
			k6.addr = any6
		}
	}
	if s.opts.IPv4Only {
		k6.addr = netip.Addr{}
	}
	return k4, k6
}

// acquire takes a use of the kernel sockets of addr's keys on port,
// opening those not open; on an error it takes none.
func (s *Server[V]) acquire(port uint16, addr netip.Addr, v6Only bool) error {
	k4, k6 := s.keysOf(port, addr, v6Only)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	var took []sockKey
	for _, k := range []sockKey{k4, k6} {
		if !k.addr.IsValid() {
			continue
		}
		switch err := s.acquireLocked(k); {
		case err == nil:
			took = append(took, k)
		case k.addr == any6 && errors.Is(err, syscall.EAFNOSUPPORT):
			// A kernel without IPv6: serve IPv4 only.
		default:
			for _, k := range took {
				s.releaseLocked(k)
			}
			return err
		}
	}
	return nil
}

// release gives back a use that acquire took.
func (s *Server[V]) release(port uint16, addr netip.Addr, v6Only bool) {
	k4, k6 := s.keysOf(port, addr, v6Only)
	s.mu.Lock()
	for _, k := range []sockKey{k4, k6} {
		if k.addr.IsValid() {
			s.releaseLocked(k)
		}
	}
	s.mu.Unlock()
	poke(s.conns.nudge) // a Conn's socket may have been the last of its address
}

// acquireLocked takes a use of k's kernel sockets, opening them if k has
// none. A kernel socket of k's still draining holds the address on the
// host: k's new life takes it back rather than fail to bind another. It
// runs under s.mu.
func (s *Server[V]) acquireLocked(k sockKey) error {
	if g := s.groups[k]; g != nil {
		g.users++
		return nil
	}
	var ls []*listener[V]
	for _, l := range s.draining[k] {
		l.bmu.Lock()
		switch {
		case l.closeAfter:
			l.closeAfter = false
			ls = append(ls, l)
		case l.draining.Load():
			// Its reader reads on as before.
			l.draining.Store(false)
			ls = append(ls, l)
		}
		l.bmu.Unlock()
	}
	delete(s.draining, k)
	// The first reader delivers multicast and broadcast: if the one that
	// did closed, another takes over.
	if i := slices.IndexFunc(ls, func(l *listener[V]) bool { return !l.more.Load() }); i > 0 {
		ls[0], ls[i] = ls[i], ls[0]
	} else if i < 0 && len(ls) > 0 {
		ls[0].more.Store(false)
	}
	fresh := len(ls)
	err := s.besideOwn(k, func() error {
		for len(ls) < s.opts.Readers {
			l, err := s.listen(k, len(ls) > 0)
			if err != nil {
				return err
			}
			ls = append(ls, l)
		}
		return nil
	})
	if err != nil {
		s.drainLocked(k, ls)
		return err
	}
	s.groups[k] = &sockGroup[V]{ls: ls, users: 1}
	s.ports[k.port]++
	for _, l := range ls[fresh:] {
		s.readers[l] = struct{}{}
		l.goroutines++
		s.wg.Add(1)
		go l.run(nil)
	}
	return nil
}

// besideOwn runs open, which binds kernel sockets of k, with SO_REUSEADDR
// set again for the while on the server's other kernel sockets of k's
// port and family: the kernel lets a wildcard and a specific address of
// one port bind together only if both sockets have it, and claimPort
// cleared it on each once bound. It runs under s.mu.
func (s *Server[V]) besideOwn(k sockKey, open func() error) error {
	var own []*listener[V]
	add := func(other sockKey, ls []*listener[V]) {
		if other.port == k.port && other != k && other.addr.Is6() == k.addr.Is6() {
			own = append(own, ls...)
		}
	}
	for other, g := range s.groups {
		add(other, g.ls)
	}
	for other, ls := range s.draining {
		add(other, ls)
	}
	set := func(on int) {
		for _, l := range own {
			_ = l.rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, on)
			})
		}
	}
	if len(own) == 0 {
		return open()
	}
	set(1)
	defer set(0)
	return open()
}

// releaseLocked gives back a use of k's kernel sockets and closes them
// when it was the last: now if their readers are between batches, else
// when the batch they are handling has sent its replies (a table socket
// may close in a handler that has replied; with PerAddress, that reader
// then reads the queue dry first, see Server.end). Datagrams still queued
// in the kernel when a socket closes are lost, as Linux loses a closed
// socket's. It runs under s.mu.
func (s *Server[V]) releaseLocked(k sockKey) {
	g := s.groups[k]
	if g == nil {
		return // never opened: IPv6 on a kernel without it
	}
	if g.users--; g.users > 0 {
		return
	}
	delete(s.groups, k)
	if s.ports[k.port]--; s.ports[k.port] == 0 {
		delete(s.ports, k.port)
	}
	s.drainLocked(k, g.ls)
}

// drainLocked closes the kernel sockets ls, k's, whose readers are between
// batches and leaves the others to close at their batch's end. It runs
// under s.mu.
func (s *Server[V]) drainLocked(k sockKey, ls []*listener[V]) {
	for _, l := range ls {
		l.bmu.Lock()
		if l.busy > 0 {
			l.closeAfter = true
			s.draining[k] = append(s.draining[k], l)
		} else {
			l.shut()
		}
		l.bmu.Unlock()
	}
}

// firstLocked returns the first kernel socket of k, nil if k has none.
// It runs under s.mu.
func (s *Server[V]) firstLocked(k sockKey) *listener[V] {
	if g := s.groups[k]; g != nil {
		return g.ls[0]
	}
	return nil
}

// listenerFor returns the kernel socket of port that sends from, or joins
// a group at, an address of a's family: the one bound to a, else the
// family's wildcard, else (with PerAddress) any of the family's.
func (s *Server[V]) listenerFor(port uint16, a netip.Addr) (*listener[V], error) {
	a = a.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports[port] == 0 {
		return nil, fmt.Errorf("udpdemux: port %d is not in use in the table", port)
	}
	wild := any4
	if a.Is6() {
		wild = any6
		if s.opts.IPv4Only {
			return nil, errors.New("udpdemux: no IPv6 kernel socket (IPv4Only)")
		}
	}
	for _, k := range []sockKey{{port, a}, {port, wild}} {
		if l := s.firstLocked(k); l != nil {
			return l, nil
		}
	}
	// Sorted, so that the choice does not change from call to call.
	var keys []sockKey
	for k := range s.groups {
		if k.port == port && k.addr.Is6() == a.Is6() {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("udpdemux: port %d has no kernel socket for %v", port, a)
	}
	slices.SortFunc(keys, func(x, y sockKey) int { return x.addr.Compare(y.addr) })
	return s.groups[keys[0]].ls[0], nil
}

// covers reports whether a multicast or broadcast datagram that l read is
// for the table socket bound to addr with v6Only to receive through l:
// with PerAddress the kernel gives a copy to the kernel socket of each
// address that matches (the wildcard and the group's or broadcast
// address), and each delivers it only to the table sockets bound to its
// own address, so that each receives one copy. Zones are not compared:
// the kernel socket of a link-local address receives only what arrives
// on its interface, and the table gives it only that interface's sockets.
func (l *listener[V]) covers(addr netip.Addr, v6Only bool) bool {
	k4, k6 := l.s.keysOf(l.port, addr.WithZone(""), v6Only)
	if l.p6 != nil {
		return k6.addr == l.addr.WithZone("")
	}
	return k4.addr == l.addr
}

// hasWildcard reports whether port has its family's wildcard kernel
// socket open.
func (s *Server[V]) hasWildcard(port uint16, v6 bool) bool {
	k := sockKey{port, any4}
	if v6 {
		k.addr = any6
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.groups[k] != nil
}

// guard returns a table hook that runs open before the caller's hook user
// (nil: none) when a socket or port comes into use, and close before it
// when one goes out of use. A veto or panic of user's closes what open
// opened: the table undoes the bind without a second event.
func guard(user func(netip.AddrPort, bool, bool) error, open func(netip.AddrPort, bool) error, close func(netip.AddrPort, bool)) func(netip.AddrPort, bool, bool) error {
	return func(a netip.AddrPort, v6Only, inUse bool) error {
		if !inUse {
			close(a, v6Only)
			if user != nil {
				_ = user(a, v6Only, false)
			}
			return nil
		}
		if err := open(a, v6Only); err != nil {
			return err
		}
		if user == nil {
			return nil
		}
		kept := false
		defer func() {
			if !kept {
				close(a, v6Only)
			}
		}()
		if err := user(a, v6Only, true); err != nil {
			return err
		}
		kept = true
		return nil
	}
}
