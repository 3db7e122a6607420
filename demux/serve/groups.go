package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
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

// acquire takes a use of the kernel sockets of a's keys (with v6Only),
// opening those not open; on an error it takes none.
func (s *Server[V]) acquire(a netip.AddrPort, v6Only bool) error {
	k4, k6 := s.keysOf(a.Port(), a.Addr(), v6Only)
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
func (s *Server[V]) release(a netip.AddrPort, v6Only bool) {
	k4, k6 := s.keysOf(a.Port(), a.Addr(), v6Only)
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
		if l.closeAfter || l.draining.Load() {
			// Taken back: its reader reads on as before.
			l.closeAfter = false
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
	// The kernel lets a wildcard and a specific address of one port bind
	// together only if both sockets have SO_REUSEADDR, and claimPort
	// cleared it on each once bound: it is set again, for the while, on
	// the server's other kernel sockets of k's port and family (k itself
	// has none left in groups or draining).
	var own []*listener[V]
	for other, g := range s.groups {
		if other.port == k.port && other.addr.Is6() == k.addr.Is6() {
			own = append(own, g.ls...)
		}
	}
	for other, d := range s.draining {
		if other.port == k.port && other.addr.Is6() == k.addr.Is6() {
			own = append(own, d...)
		}
	}
	set := func(on int) {
		for _, l := range own {
			_ = l.rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, on)
			})
		}
	}
	set(1)
	defer set(0)
	for len(ls) < s.opts.Readers {
		l, err := s.listen(k, len(ls) > 0)
		if err != nil {
			s.drainLocked(k, ls)
			return err
		}
		ls = append(ls, l)
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

// listen opens a kernel socket of key k: the first of its address, or
// another reader's (Options.Readers) if more.
func (s *Server[V]) listen(k sockKey, more bool) (*listener[V], error) {
	v6 := k.addr.Is6()
	network, addr := "udp4", netip.AddrPortFrom(k.addr, k.port)
	if v6 {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = setSockopts(int(fd), v6, s.opts.ReadBuffer)
			if serr == nil && s.opts.Readers > 1 {
				serr = setReusePort(int(fd))
			}
			if serr == nil && s.opts.FreeBind && !k.addr.IsUnspecified() {
				serr = setFreeBind(int(fd))
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err == nil {
		l := &listener[V]{s: s, port: k.port, addr: k.addr, conn: pc.(*net.UDPConn), v6: v6, window: s.opts.Batch}
		l.more.Store(more)
		if err = l.setup(); err == nil {
			return l, nil
		}
		_ = l.conn.Close()
	}
	return nil, fmt.Errorf("kernel socket %v: %w", addr, err)
}

// setup claims the port for l's socket, just bound, steers flows among
// its group's readers, and asks for each datagram's packet info.
func (l *listener[V]) setup() error {
	s := l.s
	var err, serr error
	if l.rc, err = l.conn.SyscallConn(); err != nil {
		return err
	}
	err = l.rc.Control(func(fd uintptr) {
		serr = claimPort(int(fd))
		if serr == nil && s.opts.Readers > 1 {
			// A kernel that refuses the program spreads by its own hash,
			// which still keeps each flow to one reader.
			_ = steerFlows(int(fd), l.v6, s.opts.Readers)
		}
	})
	if err = cmp.Or(err, serr); err != nil {
		return err
	}
	if l.v6 {
		p := ipv6.NewPacketConn(l.conn)
		l.pc, err = p, p.SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
	} else {
		p := ipv4.NewPacketConn(l.conn)
		l.pc, err = p, p.SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true)
	}
	if err != nil {
		return fmt.Errorf("packet info: %w", err)
	}
	return nil
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

// shut closes l's socket, for good: its reader's next failed read is its
// last.
func (l *listener[V]) shut() {
	l.closing.Store(true)
	_ = l.conn.Close()
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

// begin marks a goroutine of l as handling a batch: a close of its port
// waits for the batch's end. It takes l's lock, not the server's: a
// reader holds a batch here, and the readers of many ports that woke at
// once would each hold one while they queued on the server's lock.
func (l *listener[V]) begin() {
	l.bmu.Lock()
	l.busy++
	l.bmu.Unlock()
}

// end marks the end of a batch of l's, whose replies are sent, and closes
// l's kernel socket if its port went out of use meanwhile and no other
// batch of l's is in progress. It reports whether it closed it.
//
// With Options.PerAddress, when the caller is l's reader, it leaves the
// socket open and sets l to drain instead: the reader reads what the
// kernel queued on the socket meanwhile (datagrams sent to the address
// after its last table socket closed, which a wildcard of the table may
// receive) until the queue is empty, and then closes it (closeDrained).
func (s *Server[V]) end(l *listener[V], reader bool) bool {
	l.bmu.Lock()
	l.busy--
	if l.busy > 0 || !l.closeAfter {
		l.bmu.Unlock()
		return false
	}
	l.closeAfter = false
	if reader && s.opts.PerAddress && drainsQueue {
		l.draining.Store(true)
		l.bmu.Unlock()
		return false
	}
	s.closeLocked(l)
	return true
}

// closeDrained closes l's socket if l was set to drain (end) and has not
// been taken back meanwhile, and reports whether it did. l's reader calls
// it when a read fails: when the queue is empty, or the server stops.
func (s *Server[V]) closeDrained(l *listener[V]) bool {
	l.bmu.Lock()
	if !l.draining.CompareAndSwap(true, false) {
		l.bmu.Unlock()
		return false
	}
	s.closeLocked(l)
	return true
}

// closeLocked closes l's socket. It runs under l.bmu, which it releases,
// and then forgets l's address as draining when none of its kernel
// sockets waits to close any more.
func (s *Server[V]) closeLocked(l *listener[V]) {
	l.shut()
	l.bmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sockKey{l.port, l.addr}
	if d := s.draining[k]; d != nil && !slices.ContainsFunc(d, (*listener[V]).waitsToClose) {
		delete(s.draining, k)
	}
}

// waitsToClose reports whether l closes when its batches end or, set to
// drain, when its queue is read dry.
func (l *listener[V]) waitsToClose() bool {
	l.bmu.Lock()
	defer l.bmu.Unlock()
	return l.closeAfter || l.draining.Load()
}

// exit notes the end of a goroutine of l's; the last retires l, adding
// its counts to the server's.
func (s *Server[V]) exit(l *listener[V]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.goroutines--; l.goroutines > 0 {
		return
	}
	delete(s.readers, l)
	l.c.addTo(&s.retired)
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
	// The least address's, so that the choice does not change from call
	// to call.
	var first *listener[V]
	for k, g := range s.groups {
		if k.port == port && k.addr.Is6() == a.Is6() && (first == nil || k.addr.Less(first.addr)) {
			first = g.ls[0]
		}
	}
	if first == nil {
		return nil, fmt.Errorf("udpdemux: port %d has no kernel socket for %v", port, a)
	}
	return first, nil
}

// covers reports whether a multicast or broadcast datagram that l read is
// for the table socket bound to addr with v6Only to receive through l:
// with PerAddress the kernel gives a copy to the kernel socket of each
// address that matches (the wildcard and the group's or broadcast
// address), and each delivers it only to the table sockets bound to its
// own address, so that each receives one copy. Zones are not compared:
// the kernel socket of a link-local address receives only what arrives
// on its interface, and the table gives it only that interface's sockets.
// (A key of one family never equals an address of the other.)
func (l *listener[V]) covers(addr netip.Addr, v6Only bool) bool {
	k4, k6 := l.s.keysOf(l.port, addr.WithZone(""), v6Only)
	own := l.addr.WithZone("")
	return k4.addr == own || k6.addr == own
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
		err := user(a, v6Only, true)
		kept = err == nil
		return err
	}
}
