package serve

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/udpdemux/udpdemux/demux"
)

// Handler handles one datagram for one receiving socket that has no Conn.
// The Request's Payload is valid only during the call (the next read
// reuses its buffer), and it is shared by all the receivers of a
// multicast datagram: it must not be modified. The Request's Reply works
// only during the call too, and returns ErrRequestDone afterwards. A
// panic in a handler is not recovered: like any goroutine's, it ends the
// program.
type Handler[V any] func(r *Request[V])

// Options tune a Server. The zero value is a good default.
type Options struct {
	// IPv4Only opens no IPv6 kernel sockets. (On a kernel without IPv6
	// the server opens none anyway.)
	IPv4Only bool
	// Batch is the most datagrams read (recvmmsg) and replies sent
	// (sendmmsg) per system call; 0 means 32. After a read of fewer, the
	// next offers the kernel twice as many slots as that read filled (at
	// least 8), growing back to Batch as reads fill up.
	Batch int
	// MaxDatagram is the largest payload read; a longer datagram is
	// dropped and counted in Stats.Truncated. 0 means 2048.
	MaxDatagram int
	// ReadBuffer, if positive, sets the receive buffer of each kernel
	// socket (SO_RCVBUF; with CAP_NET_ADMIN, SO_RCVBUFFORCE, so that it
	// may exceed net.core.rmem_max). One kernel socket takes the datagrams
	// of all the table's sockets on its port: size it for all of them.
	ReadBuffer int
	// Broadcast reports whether an IPv4 destination that arrived on
	// ifindex is a broadcast address. nil means 255.255.255.255 and, on
	// Linux, every destination the kernel routed as a broadcast (from
	// IP_PKTINFO); elsewhere, the directed broadcast addresses of the
	// arrival interface, as the server last read them from the system,
	// at most a second before.
	Broadcast func(dst netip.Addr, ifindex int) bool
	// PortUnreachable answers a unicast datagram that no socket receives
	// with an ICMP (ICMPv6) port unreachable, as Linux does, so that the
	// client's socket reports ECONNREFUSED instead of waiting out its
	// timeout. It needs raw sockets, and so CAP_NET_RAW: without it, New
	// fails. The errors are rate-limited as Linux's defaults do: 1 000 a
	// second host-wide, bursts of 50 (net.ipv4.icmp_msgs_per_sec and
	// icmp_msgs_burst), and to each destination one a second after a
	// burst of 6 (icmp_ratelimit), a limit that Linux, and the server,
	// skip for a loopback destination. A datagram a limit holds back is
	// counted in Stats.ICMPLimited. Off by default: a service on a
	// table that holds some of a port's addresses then tells the rest
	// of the world which ones it does not serve, as Linux does.
	PortUnreachable bool
	// FreeBind lets the table's sockets bind addresses that the host does
	// not have, as IP_FREEBIND (or net.ipv4.ip_nonlocal_bind) does on
	// Linux. Without it, and unless the caller sets Config.IsLocal, New
	// sets Config.IsLocal from the host's interface addresses, so that a
	// bind to an address the host lacks fails with EADDRNOTAVAIL rather
	// than bind a socket that no datagram can reach.
	FreeBind bool
	// Readers is how many kernel sockets, each with its reader goroutine,
	// serve each port and family; 0 means 1. With more than one, the
	// port's kernel sockets form an SO_REUSEPORT group, among which a
	// program that the server attaches to the group (a classic BPF one)
	// spreads unicast datagrams by a hash of their source and
	// destination addresses and ports, so that one flow's datagrams keep
	// to one reader, in order, and the readers of a busy port run on
	// several cores. (The kernel's own hash, which it falls back to
	// where it refuses the program, covers the source and the wildcard
	// address, so that one peer's datagrams from one port would all
	// reach one reader, whatever address they are for.) The kernel
	// gives each socket of the group a copy of every multicast and
	// broadcast datagram: the first reader of each family delivers them,
	// the others drop their copies. Calls for one table socket may then
	// run at once on different readers, for datagrams of different flows
	// (with one reader they never do). Each reader costs a kernel socket
	// and a goroutine per port and family, idle or not, and the group
	// lets any process of the same user that sets SO_REUSEPORT join the
	// port and take a share of its datagrams: hence 1 by default.
	Readers int
	// PerAddress binds the kernel sockets to the addresses that the
	// table's sockets are bound to, instead of to the wildcard of each
	// family: a table socket on 127.0.0.2 opens a kernel socket on
	// 127.0.0.2 (with Readers, that many), shared by every table socket
	// bound to that address and closed with the last of them; a table
	// socket on a wildcard opens the family's wildcard (both families for
	// a dual-stack "::"). The host's other programs can then use the
	// port's other addresses as they could beside a program that binds
	// those addresses itself, and a table bind where the kernel refuses
	// its kernel socket (another program holds the address, or the
	// wildcard, without SO_REUSEADDR) fails with the kernel's error,
	// EADDRINUSE. It is not the default because a service with thousands
	// of addresses on one port would hold thousands of kernel sockets and
	// reader goroutines where the wildcard needs one. With FreeBind, the
	// kernel sockets set IP_FREEBIND.
	PerAddress bool
}

// ErrStopped is the error of a bind on a new port after Stop.
var ErrStopped = errors.New("server stopped")

// Server serves a demux.Table from kernel UDP sockets. Its methods are safe
// for concurrent use.
type Server[V any] struct {
	t     *demux.Table[V]
	h     Handler[V]
	opts  Options
	local hostAddrs

	mu sync.Mutex
	// groups are the open kernel sockets, by port and local address, and
	// ports counts the groups of each port.
	groups map[sockKey]*sockGroup[V]
	ports  map[uint16]int
	// draining are the kernel sockets of addresses out of use whose
	// readers are in a batch: each closes its socket when the batch's
	// replies are sent, unless a bind takes the address back first.
	draining map[sockKey][]*listener[V]
	readers  map[*listener[V]]struct{} // listeners whose reader runs
	retired  Stats                     // counts of readers that ended
	stopped  bool
	wg       sync.WaitGroup // the readers

	conns conns[V]
	icmp  *icmpSender // nil unless Options.PortUnreachable
	// watcher looks at the readers in a handler call: made at the first
	// batch that a handler handles (so that a server with no port in use
	// holds no descriptor or goroutine), ended by Stop; under wmu.
	wmu     sync.Mutex
	watcher *watcher[V]
	batches batches[V] // the readers' buffers
}

// New makes a table with cfg and a server for it that calls h for every
// datagram the table's sockets receive, except those of sockets with a
// Conn (ListenPacket, SocketConn), which go to the Conn. h may be nil
// when every socket has a Conn: a datagram for a socket without one is
// then dropped and counted in Stats.Unhandled. cfg.OnPort, if set, is
// called after the server has opened (before it has closed) a port's
// kernel sockets; its veto closes them again, and so does its panic,
// which then reaches the caller of Bind with the port's kernel sockets
// and readers gone. With Options.PerAddress the same holds for
// cfg.OnAddr and the kernel sockets of the socket's address, and OnPort
// is only told.
func New[V any](cfg demux.Config, h Handler[V], o Options) (*Server[V], error) {
	o.Readers = max(o.Readers, 1) // 0 means 1
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.MaxDatagram <= 0 {
		o.MaxDatagram = 2048
	}
	s := &Server[V]{
		h: h, opts: o,
		groups: map[sockKey]*sockGroup[V]{}, ports: map[uint16]int{},
		draining: map[sockKey][]*listener[V]{}, readers: map[*listener[V]]struct{}{},
	}
	// As many batches stay allocated as readers can run at once; more
	// are in use only while readers wait (for a core, or in a handler).
	s.batches.keep = runtime.GOMAXPROCS(0)
	if o.PortUnreachable {
		ic, err := newICMPSender(o.IPv4Only)
		if err != nil {
			return nil, fmt.Errorf("serve: PortUnreachable: %w", err)
		}
		s.icmp = ic
	}
	s.conns.nudge = make(chan struct{}, 1)
	if cfg.IsLocal == nil && !o.FreeBind {
		cfg.IsLocal = s.local.isLocal
	}
	// Without PerAddress the port's event opens the wildcards; with it,
	// each socket's bind opens its address's, and the port's event only
	// reaches the caller's hook.
	if o.PerAddress {
		cfg.OnAddr = guard(cfg.OnAddr, s.acquire, s.release)
	} else {
		user := cfg.OnPort
		var onPort func(netip.AddrPort, bool, bool) error
		if user != nil {
			onPort = func(a netip.AddrPort, _, inUse bool) error { return user(a.Port(), inUse) }
		}
		// The port's wildcards: the keys of a dual-stack "::".
		hook := guard(onPort, s.acquire, s.release)
		cfg.OnPort = func(port uint16, inUse bool) error {
			return hook(netip.AddrPortFrom(any6, port), false, inUse)
		}
	}
	t, err := demux.New[V](cfg)
	if err != nil {
		if s.icmp != nil {
			s.icmp.close()
		}
		return nil, err
	}
	s.t = t
	return s, nil
}

// Table returns the served table. Bind on it to receive datagrams.
func (s *Server[V]) Table() *demux.Table[V] { return s.t }

// Stop stops serving: every reader finishes the batch it is handling
// (handlers are called and replies sent for every datagram already read),
// then the kernel sockets are closed. Every Conn is ended: its reads and
// writes fail with an error that wraps net.ErrClosed (its socket stays in
// the table until the Conn's Close). Binds on ports not in use (with
// Options.PerAddress, every bind) fail with ErrStopped afterwards, as do
// ListenPacket and SocketConn. Stop waits
// for the readers; a handler must not call it. The table's sockets stay
// bound: Close closes them too.
func (s *Server[V]) Stop() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	ls := slices.Collect(maps.Keys(s.readers))
	s.mu.Unlock()
	for _, l := range ls {
		l.stopping.Store(true)
		_ = l.conn.SetReadDeadline(time.Unix(1, 0)) // wakes a blocked read
	}
	s.wg.Wait()
	s.wmu.Lock()
	if s.watcher != nil {
		s.watcher.close() // no reader arms any more
	}
	s.wmu.Unlock()
	// Only now, so that no reader finds a socket of a Conn that the
	// server forgot, and hands its datagram to the handler.
	s.conns.mu.Lock()
	s.shutConns(true)
	s.conns.mu.Unlock()
	poke(s.conns.nudge) // the Conns' watcher ends
	s.conns.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, g := range s.groups {
		for _, l := range g.ls {
			_ = l.conn.Close()
		}
		delete(s.groups, k)
	}
	clear(s.ports)
	if s.icmp != nil {
		// The readers, its only users, have ended.
		s.icmp.close()
	}
	return nil
}

// Close stops the server (see Stop) and closes every socket of its table,
// so that its goroutines end and its kernel sockets close: the
// io.Closer of a server. A handler must not call it.
func (s *Server[V]) Close() error {
	err := s.Stop()
	for sk := range s.t.Sockets() {
		_ = sk.Close()
	}
	return err
}

// Stats counts what the server did. Counts of kernel sockets already
// closed are included.
type Stats struct {
	// Ports is the number of ports with open kernel sockets.
	Ports int
	// Received counts datagrams read from the kernel sockets; with
	// Options.Readers above 1, or Options.PerAddress (where the kernel
	// sockets of a wildcard and of the datagram's group or broadcast
	// address each get a copy), a multicast or broadcast datagram once,
	// not once per copy.
	Received uint64
	// Delivered counts handler calls and datagrams handed to Conns (a
	// multicast datagram makes one per receiving socket).
	Delivered uint64
	// Unmatched counts unicast datagrams that no socket receives (those
	// for a socket that closed between the lookup and the delivery
	// included). Linux sends an ICMP port unreachable for each; the
	// server does with Options.PortUnreachable.
	Unmatched uint64
	// ICMPSent counts the port unreachables sent, ICMPLimited those the
	// rate limits held back, and ICMPErrors those whose send failed
	// (Options.PortUnreachable).
	ICMPSent, ICMPLimited, ICMPErrors uint64
	// UnmatchedMulticast counts multicast and broadcast datagrams that no
	// socket receives (Linux drops them silently too).
	UnmatchedMulticast uint64
	// Truncated counts datagrams longer than Options.MaxDatagram, dropped.
	Truncated uint64
	// KernelDrops counts datagrams the kernel dropped because a kernel
	// socket's receive queue was full (SO_RXQ_OVFL). It is updated when
	// the socket next receives a datagram.
	KernelDrops uint64
	// Replies and ReplyErrors count replies sent and replies that failed.
	Replies, ReplyErrors uint64
	// ReadErrors counts failed reads other than those of closing.
	ReadErrors uint64
	// ConnDrops counts datagrams that a Conn's full queue dropped
	// (Conn.SetReadBuffer).
	ConnDrops uint64
	// Unhandled counts datagrams for sockets without a Conn, dropped
	// because the server has no handler.
	Unhandled uint64
}

// Stats returns the server's counts.
func (s *Server[V]) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.retired
	for l := range s.readers {
		l.c.addTo(&st)
	}
	st.Ports = len(s.ports)
	st.ConnDrops = s.conns.drops.Load()
	return st
}

// JoinGroup joins the multicast group on interface ifindex (0: the
// system's choice) on the kernel socket of group's family for port, which
// must be in use in the table. The membership ends when the port goes out
// of use.
func (s *Server[V]) JoinGroup(port uint16, ifindex int, group netip.Addr) error {
	l, err := s.listenerFor(port, group)
	if err != nil {
		return err
	}
	var ifi *net.Interface
	if ifindex != 0 {
		if ifi, err = net.InterfaceByIndex(ifindex); err != nil {
			return err
		}
	}
	ga := &net.UDPAddr{IP: group.AsSlice()}
	return l.pc.JoinGroup(ifi, ga)
}

// WriteTo sends b to the address to from the port's kernel socket, with
// source address from (the zero Addr leaves it to routing) and, if
// ifindex is not 0, out of that interface. It is for datagrams that are
// not replies; a handler replies with Request.Reply.
func (s *Server[V]) WriteTo(b []byte, from netip.AddrPort, to netip.AddrPort, ifindex int) error {
	l, err := s.listenerFor(from.Port(), to.Addr())
	if err != nil {
		return err
	}
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	_, _, err = l.conn.WriteMsgUDPAddrPort(b, l.replyControl(from.Addr(), ifindex), to)
	return err
}
