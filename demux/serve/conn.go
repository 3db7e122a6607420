package serve

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/udpdemux/udpdemux/demux"
)

// Conn is a net.PacketConn for one socket of a served table: it reads the
// datagrams that the table gives that socket, and its writes leave from
// the socket's address and port through the port's kernel socket. It
// behaves as a *net.UDPConn bound to the socket's address does, with the
// differences listed below. Its methods are safe for concurrent use.
//
// Reads. The server's reader copies nothing for a Conn: it hands the
// buffer it read the datagram into to the Conn's queue and reads the
// next batch into a fresh one, and a read copies the payload into the
// caller's buffer, the one copy the net.PacketConn contract leaves. A
// datagram longer than the caller's buffer is truncated, as on a kernel
// socket (ReadMsgUDP reports MSG_TRUNC); one longer than
// Options.MaxDatagram never reaches the Conn (Stats.Truncated counts it). The queue holds at most the
// bytes SetReadBuffer allows; datagrams beyond that are dropped and
// counted (Drops, and Stats.ConnDrops).
//
// Control messages. ReadMsgUDP always returns, in the kernel's format, the
// control messages of a socket on which IP_PKTINFO and IP_RECVTOS (an
// IPv4 datagram) or IPV6_RECVPKTINFO and IPV6_RECVTCLASS (an IPv6 one)
// are set: the destination address and arrival interface, and the
// traffic class with its ECN bits. An IPv4 datagram on a dual-stack
// socket gets both IPv4 messages and an IPV6_PKTINFO with the v4-mapped
// destination, as Linux gives when the options of both families are set.
// WriteMsgUDP takes IP_PKTINFO or IPV6_PKTINFO (source address and
// interface), IP_TOS or IPV6_TCLASS (ECN), and UDP_SEGMENT (Linux's
// segmentation offload, which the kernel applies to the datagram alone);
// any other control message is an EINVAL error.
//
// Source addresses. A write on a socket bound to a specific address
// leaves from that address. On a wildcard socket it leaves from the
// address that the peer last wrote to (the Conn remembers that for a few
// hundred peers at a time, and always for the last four; for a peer it
// does not know, routing chooses, as it does for a kernel socket), so
// that a service that answers with WriteTo answers from the address it
// was asked on. A control message from WriteMsgUDP chooses the source
// itself.
//
// Writes. A write that continues a run (the same length to the same
// peer as the write before it), or that finds datagrams queued, copies
// the datagram into the Conn's send queue and returns; any other write
// is sent by the caller, as on a kernel socket (a lone answer gains
// nothing from a queue). The Conn's writer goroutine sends all that is
// queued at once with sendmmsg, and each run of datagrams of one size (the last may be
// shorter) to one peer from one source as one message with UDP_SEGMENT
// (segmentation offload: the kernel cuts it into the datagrams), where
// the kernel offers it (environment UDPDEMUX_DISABLE_GSO=1 turns that
// off; a send the kernel cannot segment is sent again datagram by
// datagram). quic-go on a Conn writes one packet per call, and gets
// that way the batched, segmented sends it makes itself on a kernel
// socket. The errors a write's own arguments or the Conn's state cause
// (a bad address, a payload longer than IP carries, a closed Conn, a
// passed deadline) fail the write itself; an error that the kernel gives
// for a queued datagram fails the next write, once, as a socket's
// pending error does. A write waits while the queue is full (128
// datagrams or 208 KiB: a full send buffer), until the write deadline
// passes or the Conn closes. A write with control messages
// (WriteMsgUDP with oob) waits until the queue is sent and is sent by the caller,
// so that what the kernel says of them is its result. Close sends what
// is queued before it returns; Server.Stop and Server.Close do not wait
// for that, and datagrams still queued when they close the kernel
// sockets are lost.
//
// Batches. ReadBatch reads the datagrams already queued in one call, with
// x/net's ipv4.Message, the method quic-go looks for to read in batches.
// There is no WriteBatch: the writer batches plain writes itself.
//
// What a Conn does not offer: SyscallConn, since the file descriptor
// that carries its datagrams is the port's kernel socket, which every
// socket of the table on that port shares, so socket options set on it
// would change them all (and a RawConn that set them on some other
// socket would claim effects it does not have, such as the DF bit that
// quic-go's path MTU discovery relies on). quic-go takes its fast paths
// (batched reads, ECN, segmentation offload, path MTU discovery) only on
// a connection that has SyscallConn; on a Conn it reads and writes one
// datagram per call through ReadFrom and WriteTo (the Conn's writer
// batches and segments the writes), and its receive-buffer check uses
// SetReadBuffer. SetWriteBuffer is not offered either: the send queue's
// bounds are fixed, and the kernel socket's send buffer (SO_SNDBUF) is
// the port's, not the Conn's. (quic-go logs that once;
// QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true silences it.)
//
// Close ends every read and write with an error that wraps
// net.ErrClosed; so does closing the socket through the table (writes
// and reads that start after it fail at once, and the datagrams queued
// for the Conn are dropped, as a closed kernel socket's are; blocked
// reads end at the server's next check, which it makes every 10 ms),
// and Server.Stop or Server.Close.
type Conn struct {
	sk    connSocket
	v6    bool         // the socket is IPv6 (its writes may still go to IPv4 peers)
	dual  bool         // IPv6 and not V6Only: IPv4 peers too
	k4    *net.UDPConn // the port's kernel sockets, nil if it has none
	k6    *net.UDPConn
	pool  *sync.Pool // of *packet, the server's
	drops *atomic.Uint64

	notify chan struct{} // a datagram arrived (capacity 1)
	done   chan struct{} // closed when the Conn closes
	rdl    deadline
	wdl    deadline

	mu       sync.Mutex
	q        []*packet // ring of queued datagrams
	head, n  int
	qbytes   int // buffer bytes queued
	limit    int // the most buffer bytes queued
	closed   bool
	released bool // Close has run
	ndrops   atomic.Uint64
	peers    *peerRoutes // wildcard sockets only

	sq sendQueue // written datagrams, for the writer
}

// connSocket is what a Conn needs of its table socket, whatever the
// table's value type.
type connSocket interface {
	localAddr() netip.AddrPort
	device() int
	closed() bool // closed in the table, by whatever means
	// release closes the socket in the table and forgets the Conn; an
	// error that wraps net.ErrClosed says the socket was closed already.
	release(c *Conn) error
}

// packet is one datagram, in a buffer of the server's pool: a reader's
// read slot, or in a Conn's queue.
type packet struct {
	buf     []byte // MaxDatagram bytes
	n       int
	src     netip.AddrPort
	dst     netip.Addr
	specDst netip.Addr // IP_PKTINFO's ipi_spec_dst (control)
	ifindex int
	tos     uint8
	mcast   bool
}

// copyTo copies p's datagram into q, in q's own buffer.
func (p *packet) copyTo(q *packet) {
	buf := q.buf
	*q = *p
	q.buf = buf
	copy(buf, p.buf[:p.n])
}

// defaultQueue is a Conn's queue limit until SetReadBuffer: Linux's
// default receive buffer (net.core.rmem_default).
const defaultQueue = 212992

// closePoll is how often the server checks whether the sockets of its
// Conns were closed through the table, which tells it nothing.
const closePoll = 10 * time.Millisecond

// newConn makes the Conn of sk, an IPv6 socket if v6 (dual-stack if
// dual), bound to a wildcard address if wild.
func newConn(sk connSocket, v6, dual, wild bool, k4, k6 *net.UDPConn, pool *sync.Pool, drops *atomic.Uint64) *Conn {
	c := &Conn{
		sk: sk, v6: v6, dual: dual, k4: k4, k6: k6, pool: pool, drops: drops,
		notify: make(chan struct{}, 1), done: make(chan struct{}),
		q: make([]*packet, 16), limit: defaultQueue,
	}
	if wild {
		c.peers = &peerRoutes{seed: maphash.MakeSeed()}
	}
	c.sq.init()
	return c
}

// conns are a server's Conns, by socket. The readers look a receiving
// socket up here for every datagram, without a lock.
type conns[V any] struct {
	by sync.Map // *demux.Socket[V] → *Conn
	n  atomic.Int64
	// attaching counts ListenPacket calls between their bind and their
	// registration, which mu spans: a reader that finds a socket with no
	// Conn while one runs waits for it, so that no datagram for a new
	// Conn's socket reaches the handler.
	attaching atomic.Int32
	mu        sync.Mutex
	drops     atomic.Uint64  // Stats.ConnDrops
	pool      sync.Pool      // of *packet
	watching  bool           // a watcher runs; under mu
	nudge     chan struct{}  // wakes the watcher
	wg        sync.WaitGroup // the watcher
}

// connOf returns the Conn of s, or nil.
func (s *Server[V]) connOf(sk *demux.Socket[V]) *Conn {
	cs := &s.conns
	// attaching first: a reader that found sk, and then sees no
	// ListenPacket attaching, sees the count that sk's registration (if
	// any) raised before its ListenPacket ended. Loaded the other way
	// round, both can read 0 across one ListenPacket's end.
	if cs.attaching.Load() == 0 && cs.n.Load() == 0 {
		return nil
	}
	if c, ok := cs.by.Load(sk); ok {
		return c.(*Conn)
	}
	if cs.attaching.Load() != 0 {
		// Waits for the attaching ListenPacket.
		cs.mu.Lock()
		//lint:ignore SA2001 the empty section is the wait
		cs.mu.Unlock()
	}
	// Again in either case: sk's ListenPacket may have registered it and
	// ended between the first look and the count.
	if c, ok := cs.by.Load(sk); ok {
		return c.(*Conn)
	}
	return nil
}

func (s *Server[V]) getPacket() *packet {
	if p, ok := s.conns.pool.Get().(*packet); ok {
		return p
	}
	return &packet{buf: make([]byte, s.opts.MaxDatagram)}
}

// ListenPacket binds a socket in the table with o (and the zero value)
// and returns a Conn for it, as net.ListenPacket returns a *net.UDPConn:
// every datagram that the table gives the socket goes to the Conn, none
// to the handler. Bind errors are the table's (EADDRINUSE and the like,
// which errors.Is recognises).
func (s *Server[V]) ListenPacket(o demux.Options) (*Conn, error) {
	var zero V
	cs := &s.conns
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.attaching.Add(1)
	defer cs.attaching.Add(-1)
	sk, err := s.t.Bind(o, zero)
	if err != nil {
		return nil, err
	}
	c, err := s.attachLocked(sk)
	if err != nil {
		_ = sk.Close()
		return nil, err
	}
	return c, nil
}

// SocketConn returns a Conn for sk, a socket already bound in the table:
// from then on, the datagrams that the table gives sk go to the Conn
// rather than to the handler. Closing the Conn closes sk. A socket has
// one Conn at most: a second call fails with EEXIST, and a closed
// socket's with an error that matches net.ErrClosed.
func (s *Server[V]) SocketConn(sk *demux.Socket[V]) (*Conn, error) {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return s.attachLocked(sk)
}

// attachLocked makes sk's Conn. It runs under conns.mu.
func (s *Server[V]) attachLocked(sk *demux.Socket[V]) (*Conn, error) {
	if sk == nil {
		return nil, fmt.Errorf("udpdemux: serve: nil socket: %w", syscall.EINVAL)
	}
	fail := func(err error) (*Conn, error) {
		return nil, &demux.OpError{Op: "conn", Addr: sk.LocalAddr(), Err: err}
	}
	if sk.Closed() {
		return fail(fmt.Errorf("%w (%w)", syscall.EBADF, net.ErrClosed))
	}
	if !s.owns(sk) {
		return fail(fmt.Errorf("socket of another table: %w", syscall.EBADF))
	}
	// The first kernel sockets of the keys through which sk receives send
	// its datagrams: they stay open while sk is bound. A family that sk
	// does not receive has the zero Addr, which no group has.
	o := sk.Options()
	k4, k6 := s.keysOf(o.Port, o.Addr, o.V6Only)
	s.mu.Lock()
	l4, l6 := s.firstLocked(k4), s.firstLocked(k6)
	stopped := s.stopped
	s.mu.Unlock()
	if stopped || (l4 == nil && l6 == nil) {
		return fail(ErrStopped)
	}
	v6 := !o.Addr.Is4()
	c := newConn(&connHome[V]{s: s, sk: sk}, v6, v6 && !o.V6Only, o.Addr.IsUnspecified(),
		nil, nil, &s.conns.pool, &s.conns.drops)
	if l4 != nil {
		c.k4 = l4.conn
	}
	if l6 != nil {
		c.k6 = l6.conn
	}
	if testPause != nil {
		testPause()
	}
	if _, loaded := s.conns.by.LoadOrStore(sk, c); loaded {
		return fail(fmt.Errorf("socket has a Conn: %w", syscall.EEXIST))
	}
	s.conns.n.Add(1)
	if !s.conns.watching {
		s.conns.watching = true
		s.conns.wg.Add(1)
		go s.watch()
	}
	return c, nil
}

// testPause, if set, runs where a Conn is about to be registered and
// forgotten, so that a test can hold the moments when a reader may find
// a Conn's socket without the Conn open for longer.
var testPause func()

func (s *Server[V]) owns(sk *demux.Socket[V]) bool {
	for x := range s.t.Sockets() {
		if x == sk {
			return true
		}
	}
	return false
}

func (s *Server[V]) forget(sk *demux.Socket[V], c *Conn) {
	if s.conns.by.CompareAndDelete(sk, c) {
		s.conns.n.Add(-1)
	}
}

// watch ends the Conns whose sockets were closed through the table, which
// tells the server nothing of it: it looks every closePoll, and when a
// port goes out of use. It ends when the server has no Conns left.
func (s *Server[V]) watch() {
	defer s.conns.wg.Done()
	t := time.NewTicker(closePoll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.conns.nudge:
		}
		s.shutConns(false)
		s.conns.mu.Lock()
		if s.conns.n.Load() == 0 {
			s.conns.watching = false
			s.conns.mu.Unlock()
			return
		}
		s.conns.mu.Unlock()
	}
}

// shutConns ends and forgets the Conns whose sockets were closed, or
// with all (for Stop) every Conn.
func (s *Server[V]) shutConns(all bool) {
	s.conns.by.Range(func(k, v any) bool {
		if sk := k.(*demux.Socket[V]); all || sk.Closed() {
			v.(*Conn).shut()
			s.forget(sk, v.(*Conn))
		}
		return true
	})
}

// connHome is a Conn's socket in its server's table.
type connHome[V any] struct {
	s  *Server[V]
	sk *demux.Socket[V]
}

func (h *connHome[V]) localAddr() netip.AddrPort { return h.sk.LocalAddr() }

func (h *connHome[V]) device() int { return h.sk.Options().Device }

func (h *connHome[V]) closed() bool { return h.sk.Closed() }

// release closes the socket before it forgets the Conn: a reader that
// finds the socket without a Conn then sees it closed, and drops the
// datagram rather than hand it to the handler.
func (h *connHome[V]) release(c *Conn) error {
	err := h.sk.Close()
	if testPause != nil {
		testPause()
	}
	h.s.forget(h.sk, c)
	return err
}

// push queues p, reporting false (and counting a drop) if the queue is
// full or the Conn closed: then p stays the caller's.
func (c *Conn) push(p *packet) bool {
	c.mu.Lock()
	if c.closed || (c.n > 0 && c.qbytes+cap(p.buf) > c.limit) {
		closed := c.closed
		c.mu.Unlock()
		if !closed {
			c.ndrops.Add(1)
			c.drops.Add(1)
		}
		return false
	}
	if c.n == len(c.q) {
		// Full: the ring in order, then as many free slots.
		c.q = slices.Concat(c.q[c.head:], c.q[:c.head], make([]*packet, len(c.q)))
		c.head = 0
	}
	c.q[(c.head+c.n)%len(c.q)] = p
	c.n++
	c.qbytes += cap(p.buf)
	c.mu.Unlock()
	poke(c.notify)
	return true
}

// poke wakes the receiver of ch, a channel of capacity 1, unless a
// wake-up is pending already.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// next waits for the next datagram, the read deadline or the close. As
// on a kernel socket, a deadline that has passed fails the read even
// when a datagram is queued, so that a service that stops its reads with
// a deadline stops at once.
func (c *Conn) next() (*packet, error) {
	for {
		passed, changed := c.rdl.check()
		c.mu.Lock()
		if c.closed || c.sk.closed() {
			// Closed, or closed through the table, which tells the server
			// only at its next check: then what was queued goes with the
			// socket, as a closed kernel socket's queue does (shut does
			// nothing on a Conn already closed).
			c.mu.Unlock()
			c.shut()
			return nil, net.ErrClosed
		}
		if passed {
			c.mu.Unlock()
			return nil, os.ErrDeadlineExceeded
		}
		if c.n > 0 {
			p := c.popLocked()
			more := c.n > 0
			c.mu.Unlock()
			if more {
				poke(c.notify) // for another reader
			}
			return p, nil
		}
		c.mu.Unlock()
		select {
		case <-c.notify:
		case <-c.done:
		case <-changed:
		}
	}
}

// popLocked takes the first queued datagram; c.n must not be 0. It runs
// under c.mu. A wildcard socket learns where the sender wrote to when
// the datagram is read, not when it is queued, so that a reply to it
// leaves from that address even if the peer wrote elsewhere meanwhile.
func (c *Conn) popLocked() *packet {
	p := c.q[c.head]
	c.q[c.head] = nil
	c.head = (c.head + 1) % len(c.q)
	c.n--
	c.qbytes -= cap(p.buf)
	if c.peers != nil && !p.mcast {
		c.peers.learn(p.src, p.dst, p.ifindex)
	}
	return p
}

func (c *Conn) opError(op string, to net.Addr, err error) error {
	return &net.OpError{Op: op, Net: "udp", Source: c.LocalAddr(), Addr: to, Err: err}
}

// ReadFromUDPAddrPort reads a datagram, as net.UDPConn's method does. An
// IPv4 sender of a datagram on an IPv6 socket is v4-mapped.
func (c *Conn) ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error) {
	n, _, _, src, err := c.ReadMsgUDPAddrPort(b, nil)
	return n, src, err
}

// peerForm returns a peer's address as the socket's family shows it.
func (c *Conn) peerForm(a netip.AddrPort) netip.AddrPort {
	if c.v6 && a.Addr().Is4() {
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr().As16()), a.Port())
	}
	return a
}

// ReadFrom reads a datagram into b: net.PacketConn's method. The sender
// is a *net.UDPAddr.
func (c *Conn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, src, err := c.ReadFromUDPAddrPort(b)
	if err != nil {
		return 0, nil, err
	}
	return n, udpAddr(src), nil
}

// udpAddr returns a as a *net.UDPAddr in one allocation, its IP with it,
// where net.UDPAddrFromAddrPort makes two.
func udpAddr(a netip.AddrPort) *net.UDPAddr {
	x := new(struct {
		a  net.UDPAddr
		ip [16]byte
	})
	x.ip = a.Addr().As16()
	x.a.IP = x.ip[:]
	if a.Addr().Is4() {
		x.a.IP = x.ip[12:]
	}
	x.a.Port, x.a.Zone = int(a.Port()), a.Addr().Zone()
	return &x.a
}

// ReadFromUDP is ReadFrom with the sender as a *net.UDPAddr.
func (c *Conn) ReadFromUDP(b []byte) (int, *net.UDPAddr, error) {
	n, _, _, addr, err := c.ReadMsgUDP(b, nil)
	return n, addr, err
}

// ReadMsgUDPAddrPort reads a datagram into b and its control messages
// (see Conn) into oob, as net.UDPConn's method does: flags has
// MSG_TRUNC if b was too short, MSG_CTRUNC if oob was.
func (c *Conn) ReadMsgUDPAddrPort(b, oob []byte) (n, oobn, flags int, src netip.AddrPort, err error) {
	p, err := c.next()
	if err != nil {
		return 0, 0, 0, netip.AddrPort{}, c.opError("read", nil, err)
	}
	n, oobn, flags, src = c.take(p, [][]byte{b}, oob)
	return n, oobn, flags, src, nil
}

// take copies p's payload across bufs and its control messages (see
// Conn) into oob, and gives p back to the pool. It returns what a read
// reports: the bytes copied and written, the flags (MSG_TRUNC if bufs
// were too short, MSG_CTRUNC if oob was) and the sender.
func (c *Conn) take(p *packet, bufs [][]byte, oob []byte) (n, oobn, flags int, src netip.AddrPort) {
	rest := p.buf[:p.n]
	for _, b := range bufs {
		k := copy(b, rest)
		rest, n = rest[k:], n+k
	}
	if len(rest) > 0 {
		flags |= msgTrunc
	}
	var trunc bool
	if oobn, trunc = c.appendControl(oob[:0], p); trunc {
		flags |= msgCtrunc
	}
	src = c.peerForm(p.src)
	c.pool.Put(p)
	return n, oobn, flags, src
}

// ReadMsgUDP is ReadMsgUDPAddrPort with the sender as a *net.UDPAddr.
func (c *Conn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	var src netip.AddrPort
	n, oobn, flags, src, err = c.ReadMsgUDPAddrPort(b, oob)
	if err == nil {
		addr = udpAddr(src)
	}
	return n, oobn, flags, addr, err
}

// ReadBatch reads up to len(ms) datagrams into ms, as x/net's
// ipv4.PacketConn.ReadBatch (recvmmsg) does, and returns how many: it
// waits for the first, as a read does, and takes the others only if
// they are queued already. Each message gets its payload (across its
// Buffers), its control messages (see Conn) in OOB, and its sender as a
// *net.UDPAddr in Addr; N, NN and Flags as ReadMsgUDP reports them. flags
// must be 0.
func (c *Conn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	if flags != 0 {
		return 0, c.opError("read", nil, syscall.EOPNOTSUPP)
	}
	if len(ms) == 0 {
		return 0, nil
	}
	p, err := c.next()
	if err != nil {
		return 0, c.opError("read", nil, err)
	}
	n := 0
	for p != nil {
		m := &ms[n]
		var src netip.AddrPort
		m.N, m.NN, m.Flags, src = c.take(p, m.Buffers, m.OOB)
		m.Addr = udpAddr(src)
		n++
		if n == len(ms) {
			break
		}
		p = c.poll()
	}
	return n, nil
}

// poll returns the next queued datagram, or nil if none is queued or the
// Conn is closed.
func (c *Conn) poll() *packet {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.n == 0 || c.sk.closed() {
		return nil
	}
	return c.popLocked()
}

// WriteToUDPAddrPort sends b to addr, as net.UDPConn's method does, from
// the socket's address (see Conn for wildcard sockets).
func (c *Conn) WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error) {
	n, _, err := c.write(b, nil, addr)
	return n, err
}

// WriteTo sends b to addr, a *net.UDPAddr: net.PacketConn's method.
func (c *Conn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok || ua == nil {
		return 0, c.opError("write", addr, syscall.EINVAL)
	}
	return c.WriteToUDP(b, ua)
}

// WriteToUDP is WriteTo for a *net.UDPAddr.
func (c *Conn) WriteToUDP(b []byte, addr *net.UDPAddr) (int, error) {
	n, _, err := c.WriteMsgUDP(b, nil, addr)
	return n, err
}

// WriteMsgUDPAddrPort sends b to addr with the control messages in oob
// (see Conn), as net.UDPConn's method does.
func (c *Conn) WriteMsgUDPAddrPort(b, oob []byte, addr netip.AddrPort) (n, oobn int, err error) {
	return c.write(b, oob, addr)
}

// WriteMsgUDP is WriteMsgUDPAddrPort for a *net.UDPAddr.
func (c *Conn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	if addr == nil {
		return 0, 0, c.opError("write", nil, syscall.EINVAL)
	}
	return c.write(b, oob, addr.AddrPort())
}

func (c *Conn) write(b, oob []byte, to netip.AddrPort) (int, int, error) {
	fail := func(err error) (int, int, error) {
		return 0, 0, c.opError("write", net.UDPAddrFromAddrPort(to), err)
	}
	if c.isClosed() || c.sk.closed() {
		// A socket closed through the table sends nothing, though the
		// server may not have ended its Conn yet.
		return fail(net.ErrClosed)
	}
	if passed, _ := c.wdl.check(); passed {
		return fail(os.ErrDeadlineExceeded)
	}
	if !to.IsValid() || to.Port() == 0 || to.Addr().IsUnspecified() {
		return fail(syscall.EINVAL)
	}
	v4 := to.Addr().Unmap().Is4()
	k := c.k6
	switch {
	case v4 && c.v6 && !c.dual:
		return fail(syscall.ENETUNREACH) // as Linux, for an IPv6-only socket
	case !v4 && !c.v6:
		return fail(syscall.EAFNOSUPPORT)
	case v4:
		k = c.k4
	}
	if k == nil {
		return fail(syscall.EAFNOSUPPORT) // no kernel socket of that family
	}
	var ctl sendControl
	if err := ctl.parse(oob); err != nil {
		return fail(err)
	}
	if !ctl.src.IsValid() {
		ctl.src, ctl.ifindex = c.source(to)
	}
	if ctl.ifindex == 0 {
		ctl.ifindex = c.sk.device()
	}
	var buf [128]byte
	out, ok := ctl.marshal(buf[:0], v4)
	if !ok {
		return fail(syscall.EINVAL) // a source of the other family
	}
	// The longest UDP payload IPv6 carries, less IPv4's header for
	// IPv4: the kernel refuses a longer write with EMSGSIZE.
	max := 65535 - 8
	if v4 {
		max -= 20
	}
	if len(b) > max {
		return fail(syscall.EMSGSIZE)
	}
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	var err error
	if len(oob) == 0 {
		// A plain write, as a service without control messages (quic-go
		// on a Conn) makes them: queued for the writer if it continues a
		// run (see enqueue).
		var queued bool
		if queued, err = c.enqueue(b, out, k, to); queued {
			return len(b), 0, nil
		}
	} else {
		// The caller's control messages may ask what the kernel
		// refuses: send now, after what is queued, so that the kernel's
		// error is the caller's.
		c.drain()
	}
	n := 0
	if err == nil {
		n, _, err = k.WriteMsgUDPAddrPort(b, out, to)
	}
	if err != nil {
		if oe, ok := err.(*net.OpError); ok {
			err = oe.Err // the kernel socket's address is not the Conn's
		}
		return fail(err)
	}
	return n, len(oob), nil
}

// source returns the address and interface a write to peer leaves from
// when the caller names none: the socket's own address, or for a
// wildcard socket the one peer last wrote to, if known.
func (c *Conn) source(peer netip.AddrPort) (netip.Addr, int) {
	local := c.sk.localAddr().Addr()
	if !local.IsUnspecified() || c.peers == nil {
		return local.Unmap(), 0
	}
	c.mu.Lock()
	a, ifindex := c.peers.lookup(peer)
	c.mu.Unlock()
	if !a.IsLinkLocalUnicast() || a.Is4() {
		// The address alone decides the way out, as for a socket bound
		// to it.
		ifindex = 0
	}
	return a, ifindex
}

// LocalAddr returns the socket's local address, a *net.UDPAddr.
func (c *Conn) LocalAddr() net.Addr {
	return net.UDPAddrFromAddrPort(c.sk.localAddr())
}

// SetDeadline sets the read and write deadlines, as net.Conn's method
// does: a read or write after it fails with os.ErrDeadlineExceeded (a
// net.Error whose Timeout is true), and so does a read that is blocked
// when it passes, even if it is already past. The zero Time removes it.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline (see SetDeadline).
func (c *Conn) SetReadDeadline(t time.Time) error { return c.setDeadline(&c.rdl, t) }

// SetWriteDeadline sets the write deadline (see SetDeadline). A write
// waits only while the Conn's send queue is full (see Conn), so the
// deadline fails those and the writes started after it.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.setDeadline(&c.wdl, t) }

func (c *Conn) setDeadline(d *deadline, t time.Time) error {
	if c.isClosed() {
		return c.opError("set", nil, net.ErrClosed)
	}
	d.set(t)
	return nil
}

// SetReadBuffer bounds the Conn's queue of received datagrams to bytes
// bytes of buffers (each datagram takes Options.MaxDatagram bytes, and
// one datagram is always accepted). It does not change the port's
// kernel socket, which the table's other sockets share: its size is
// Options.ReadBuffer.
func (c *Conn) SetReadBuffer(bytes int) error {
	if bytes < 0 {
		return c.opError("set", nil, syscall.EINVAL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opError("set", nil, net.ErrClosed)
	}
	c.limit = bytes
	return nil
}

// Drops returns the number of datagrams dropped because the Conn's queue
// was full.
func (c *Conn) Drops() uint64 { return c.ndrops.Load() }

func (c *Conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close closes the Conn and its socket in the table. Reads and writes
// blocked in the Conn return an error that wraps net.ErrClosed, as do
// later calls; received datagrams still queued are dropped, as a kernel
// socket's are, and written ones still queued are sent before Close
// returns, as a kernel socket's send buffer is.
func (c *Conn) Close() error {
	c.mu.Lock()
	released := c.released
	c.released = true
	c.mu.Unlock()
	c.shut()
	c.flush()
	if released {
		return c.opError("close", nil, net.ErrClosed)
	}
	if err := c.sk.release(c); err != nil && !errors.Is(err, net.ErrClosed) {
		return c.opError("close", nil, err)
	}
	return nil
}

// shut ends the Conn's reads and writes and frees its queue.
func (c *Conn) shut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
	c.closeQueue()
	for c.n > 0 {
		c.pool.Put(c.popLocked())
	}
}

// deadline is a read or write deadline: check says whether it passed, and
// hands a waiter a channel that is closed when it passes or is set
// again, so that a blocked read wakes either way.
type deadline struct {
	mu      sync.Mutex
	at      time.Time
	timer   *time.Timer
	changed chan struct{} // nil until a waiter needs it
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = t
	d.signal() // waiters look again, whatever the new deadline is
	wait := time.Until(t)
	switch {
	case t.IsZero() || wait <= 0:
		if d.timer != nil {
			d.timer.Stop()
		}
	case d.timer == nil:
		d.timer = time.AfterFunc(wait, d.fire)
	default:
		d.timer.Reset(wait)
	}
}

// fire runs when a deadline passes. A stale run (the deadline was set
// again meanwhile) only wakes the waiters, who look again.
func (d *deadline) fire() {
	d.mu.Lock()
	d.signal()
	d.mu.Unlock()
}

func (d *deadline) signal() {
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
}

func (d *deadline) check() (passed bool, changed <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.at.IsZero() && !time.Now().Before(d.at) {
		return true, nil
	}
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	return false, d.changed
}

// peerRoutes remembers, for a wildcard socket, which local address each
// recent peer wrote to: sets of four peers, chosen by hash, where a peer
// new to its set takes the place of the one learned longest ago, so that
// it stays small however many peers write. Four ways, not one slot per
// hash: two peers that shared a slot would forget each other while both
// wait for answers, and the answer to the first would leave from
// whatever address routing chooses (with four ways, the last four peers
// that wrote are always remembered).
type peerRoutes struct {
	seed maphash.Seed
	sets [64][4]peerRoute
}

type peerRoute struct {
	peer    netip.AddrPort
	local   netip.Addr
	ifindex int
}

func (r *peerRoutes) set(peer netip.AddrPort) *[4]peerRoute {
	return &r.sets[maphash.Comparable(r.seed, peer)%uint64(len(r.sets))]
}

func (r *peerRoutes) learn(peer netip.AddrPort, local netip.Addr, ifindex int) {
	s := r.set(peer)
	i := 0
	for i < len(s)-1 && s[i].peer != peer {
		i++
	}
	// s[i] is peer's entry, or else the set's oldest: the newer ones
	// move down one, and peer goes first.
	copy(s[1:i+1], s[:i])
	s[0] = peerRoute{peer, local, ifindex}
}

// lookup returns where peer last wrote to: the zero Addr if not known.
func (r *peerRoutes) lookup(peer netip.AddrPort) (netip.Addr, int) {
	peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	for _, e := range r.set(peer) {
		if e.peer == peer {
			return e.local, e.ifindex
		}
	}
	return netip.Addr{}, 0
}
