package serve

import (
	"net"
	"net/netip"
	"os"
	"sync"
)

// sendQueue holds a Conn's written datagrams until its writer goroutine
// sends them: a write copies its datagram in and returns, and the writer
// sends all that is queued at once (on Linux with sendmmsg, and
// datagrams of one size for one peer as one segmented send, UDP GSO), so
// that a service that writes datagram after datagram, as quic-go does on
// a Conn, pays one system call for many.
//
// The ring's n entries from head on are queued. Those that the writer
// found when it last looked are its own until it has sent them: it
// reads them without the lock, while writes add entries after them.
type sendQueue struct {
	mu      sync.Mutex
	ents    [sendSlots]sendEntry
	head, n int
	bytes   int   // payload bytes queued
	idle    bool  // the writer waits for work
	started bool  // the writer goroutine was started
	closed  bool  // no more writes; the writer ends when the queue is empty
	err     error // a queued datagram's send error, for the next write
	lastTo  netip.AddrPort
	lastLen int // the last write's peer and length

	wake   chan struct{} // the writer has work (capacity 1)
	space  chan struct{} // closed when the writer frees entries; nil until a write waits
	exited chan struct{} // closed when the writer ends
}

// sendEntry is one queued datagram.
type sendEntry struct {
	buf  []byte // the payload, a copy of the caller's
	to   netip.AddrPort
	k    *net.UDPConn // the kernel socket of to's family
	oob  [sendOOB]byte
	oobn int
}

const (
	// sendSlots is how many datagrams a Conn queues for sending.
	sendSlots = 128
	// sendLimit is how many payload bytes a Conn queues for sending (one
	// datagram is always accepted): Linux's default send buffer
	// (net.core.wmem_default).
	sendLimit = 212992
	// sendOOB is room for a queued datagram's control messages: an
	// IPV6_PKTINFO (40 bytes), and a UDP_SEGMENT (24) that the writer adds.
	sendOOB = 64
	// keepBuf is the largest entry buffer kept for the next datagram.
	keepBuf = 16 << 10
)

func (q *sendQueue) init() {
	q.wake = make(chan struct{}, 1)
	q.exited = make(chan struct{})
}

// enqueue queues a copy of b for to through k, with the control messages
// ctl (at most sendOOB bytes), and reports true; or reports false, and
// queues nothing, when the caller should send b itself: when nothing is
// queued or being sent, and b does not follow a datagram of its length
// to the same peer. Only such runs gain from the queue (the writer sends
// them as one segmented message; batching alone does not pay for the
// hand-off), and a lone datagram, a request's answer, is sent sooner by
// its writer than through a goroutine woken for it.
//
// It waits while the queue is full, as a write on a kernel socket with
// a full send buffer does, until the writer frees room, the write
// deadline passes or the Conn closes.
func (c *Conn) enqueue(b []byte, ctl []byte, k *net.UDPConn, to netip.AddrPort) (bool, error) {
	q := &c.sq
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return false, net.ErrClosed
		}
		if err := q.err; err != nil {
			// A datagram queued earlier failed: the kernel would have
			// said so then, so say it now.
			q.err = nil
			q.mu.Unlock()
			return false, err
		}
		run := to == q.lastTo && len(b) == q.lastLen
		q.lastTo, q.lastLen = to, len(b)
		if q.n == 0 && (q.idle || !q.started) && !run {
			q.mu.Unlock()
			return false, nil
		}
		if q.n == 0 || (q.n < len(q.ents) && q.bytes+len(b) <= sendLimit) {
			e := &q.ents[(q.head+q.n)%len(q.ents)]
			e.buf = append(e.buf[:0], b...)
			e.to, e.k = to, k
			e.oobn = copy(e.oob[:], ctl)
			q.n++
			q.bytes += len(b)
			start := !q.started
			q.started = true
			kick := q.idle
			q.idle = false
			q.mu.Unlock()
			if start {
				go c.writer()
			} else if kick {
				poke(q.wake)
			}
			return true, nil
		}
		if q.space == nil {
			q.space = make(chan struct{})
		}
		space := q.space
		q.mu.Unlock()
		passed, changed := c.wdl.check()
		if passed {
			return false, os.ErrDeadlineExceeded
		}
		select {
		case <-space:
		case <-c.done:
		case <-changed:
		}
	}
}

// writer sends what the Conn's writes queue, until the Conn closes and
// the queue is empty.
func (c *Conn) writer() {
	q := &c.sq
	defer close(q.exited)
	s := newSender(c)
	for {
		q.mu.Lock()
		if q.n == 0 {
			if q.closed {
				q.mu.Unlock()
				return
			}
			q.idle = true
			q.mu.Unlock()
			<-q.wake
			continue
		}
		head, n := q.head, q.n
		q.mu.Unlock()
		err := s.send(q, head, n)
		q.mu.Lock()
		bytes := 0
		for i := range n {
			e := &q.ents[(head+i)%len(q.ents)]
			bytes += len(e.buf)
			if cap(e.buf) > keepBuf {
				e.buf = nil
			}
		}
		q.head = (head + n) % len(q.ents)
		q.n -= n
		q.bytes -= bytes
		if err != nil && q.err == nil {
			q.err = err
		}
		if q.space != nil {
			close(q.space)
			q.space = nil
		}
		q.mu.Unlock()
	}
}

// closeQueue ends the writes; the writer sends what is queued, and ends.
func (c *Conn) closeQueue() {
	q := &c.sq
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	poke(q.wake)
}

// drain waits until the writer has sent what is queued now, or the
// Conn closes.
func (c *Conn) drain() {
	q := &c.sq
	for {
		q.mu.Lock()
		if q.n == 0 || q.closed {
			q.mu.Unlock()
			return
		}
		if q.space == nil {
			q.space = make(chan struct{})
		}
		space := q.space
		q.mu.Unlock()
		select {
		case <-space:
		case <-c.done:
		}
	}
}

// flush waits until the writer has sent what was queued before the Conn
// closed, and ended.
func (c *Conn) flush() {
	q := &c.sq
	q.mu.Lock()
	started := q.started
	q.mu.Unlock()
	if started {
		<-q.exited
	}
}
