package serve

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/udpdemux/udpdemux/demux"
)

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
		cs.mu.Lock()
		cs.mu.Unlock() //nolint:staticcheck // waits for the attaching ListenPacket
	}
	// Again in either case: sk's ListenPacket may have registered it and
	// ended between the first look and the count.
	if c, ok := cs.by.Load(sk); ok {
		return c.(*Conn)
	}
	return nil
}

// getPacket returns a free packet buffer.
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

// owns reports whether sk is a socket of the server's table.
func (s *Server[V]) owns(sk *demux.Socket[V]) bool {
	for x := range s.t.Sockets() {
		if x == sk {
			return true
		}
	}
	return false
}

// forget removes c, sk's Conn, from the server.
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
		s.conns.by.Range(func(k, v any) bool {
			if sk := k.(*demux.Socket[V]); sk.Closed() {
				v.(*Conn).shut()
				s.forget(sk, v.(*Conn))
			}
			return true
		})
		s.conns.mu.Lock()
		if s.conns.n.Load() == 0 {
			s.conns.watching = false
			s.conns.mu.Unlock()
			return
		}
		s.conns.mu.Unlock()
	}
}

// shutConns ends every Conn and forgets it, for Stop.
func (s *Server[V]) shutConns() {
	s.conns.by.Range(func(k, v any) bool {
		v.(*Conn).shut()
		s.forget(k.(*demux.Socket[V]), v.(*Conn))
		return true
	})
	poke(s.conns.nudge)
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
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
