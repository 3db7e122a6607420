package serve

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/udpdemux/udpdemux/demux"
)

// Request is one datagram for one receiving socket. Each handler call
// gets a Request of its own, which its Reply refuses once the call has
// returned.
type Request[V any] struct {
	// Payload is the datagram's payload.
	Payload []byte
	// Src and Dst are the datagram's source and destination (IPv4 in
	// 4-byte form); Dst is where it was sent, from the control message.
	Src, Dst netip.AddrPort
	// Ifindex is the interface it arrived on.
	Ifindex int
	// Multicast is set for a multicast or broadcast destination.
	Multicast bool
	// Socket is the receiving socket, Value the value attached to it.
	Socket *demux.Socket[V]
	Value  V

	b    *batch[V]
	done bool // the handler returned; under b.mu
}

// ErrRequestDone is the error of a Reply made after the Request's handler
// returned. The reply is not sent: the datagram's batch may be gone, and
// its client with it.
var ErrRequestDone = errors.New("serve: reply after the handler returned")

// Reply queues p to be sent back to r.Src, from r.Dst's address when r.Dst
// is unicast (so a datagram sent to 127.0.0.2 is answered from 127.0.0.2)
// and from the address routing picks for a multicast or broadcast one. The
// reply leaves by the arrival interface when the addresses alone do not
// determine it (multicast, broadcast, IPv6 link-local); otherwise routing
// chooses, as it would for a kernel socket bound to r.Dst. p is copied;
// the replies of a batch are sent together (sendmmsg) after its handlers
// return, even when a handler closed the socket or its port meanwhile;
// those queued before a slow call leave when the call is handed off (see
// the package documentation).
//
// Reply may be called from any goroutine, but only until the handler
// returns: afterwards it sends nothing and returns ErrRequestDone. A
// Request that the server did not make gives an error that wraps EINVAL.
// A failed send is counted in Stats.ReplyErrors, not returned.
func (r *Request[V]) Reply(p []byte) error {
	if r == nil || r.b == nil {
		return fmt.Errorf("serve: Reply on a Request the server did not make: %w", syscall.EINVAL)
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.done {
		return ErrRequestDone
	}
	b.queue(r, p)
	return nil
}

// listener is one kernel socket, bound to a port and to the wildcard
// address of its family or (Options.PerAddress) an address of the
// table's sockets, and the reader goroutine that serves it.
type listener[V any] struct {
	s    *Server[V]
	port uint16
	addr netip.Addr // its key's address (sockKey)
	// more is set on a reader other than its address's first
	// (Options.Readers): it drops its copies of multicast and broadcast
	// datagrams, which the first delivers. It is cleared when the first
	// closed and the address, taken back while draining, keeps this one.
	more atomic.Bool
	conn *net.UDPConn
	pc   packetConn // x/net's view of conn, of its family
	v6   bool
	// closing is set when the port went out of use, stopping when the
	// server stops: either makes a failed read the reader's last.
	closing, stopping atomic.Bool
	// busy counts the goroutines handling a batch of l's and closeAfter
	// is set when its port went out of use meanwhile, both under bmu
	// (taken after s.mu when both are); goroutines counts its reader and
	// the goroutines of handed-off calls (handoff.go), under s.mu.
	bmu        sync.Mutex
	busy       int
	closeAfter bool
	// draining is set when the reader is to read the socket's queue dry
	// and then close it (Server.end); it changes under bmu, and the
	// reader's reads, which do not take bmu, load it.
	draining   atomic.Bool
	goroutines int
	// rc reads the socket; readFn is the reader's callback for it
	// (tryRead), made once. cur is the batch that l's reader holds, nil
	// while it has none; window is how many of its messages the next read
	// offers the kernel (see minWindow); got and errno are what tryRead
	// read. All five are the reader's.
	rc     syscall.RawConn
	readFn func(fd uintptr) bool
	cur    *batch[V]
	window int
	got    int
	errno  syscall.Errno
	// active is the batch of l's reader, nil while it has none; armed is
	// set while the watcher should look at it (handoff.go), registered
	// while the watcher holds it, and looking keeps two
	// looks from overlapping.
	active     atomic.Pointer[batch[V]]
	armed      atomic.Bool
	registered atomic.Bool
	looking    sync.Mutex
	// stuck are the sockets whose handler calls were handed off, with
	// the batch of each call's goroutine; nstuck is len(stuck), read
	// without mu. Both under mu.
	mu     sync.Mutex
	stuck  map[*demux.Socket[V]]*batch[V]
	nstuck atomic.Int32
	c      counters
}

// counters are a listener's counts, written by its reader, indexed by
// the constants below.
type counters [nCounts]atomic.Uint64

const (
	// The counts that Stats adds up, in the order of statsFields.
	nReceived = iota
	nDelivered
	nUnmatched
	nUnmatchedMulti
	nTruncated
	nReplies
	nReplyErrors
	nReadErrors
	nUnhandled
	nICMPSent
	nICMPLimited
	nICMPErrors
	nKernelDrops // SO_RXQ_OVFL: the socket's running total, stored
	// nCopies counts the multicast and broadcast datagrams that a reader
	// other than its family's first dropped (Options.Readers): its
	// tests read it, to see that the kernel copies them to each socket.
	nCopies
	nCounts
)

// statsFields returns st's fields that a listener's counts add to, in
// the order of their counters.
func statsFields(st *Stats) [nCopies]*uint64 {
	return [...]*uint64{&st.Received, &st.Delivered, &st.Unmatched, &st.UnmatchedMulticast,
		&st.Truncated, &st.Replies, &st.ReplyErrors, &st.ReadErrors, &st.Unhandled,
		&st.ICMPSent, &st.ICMPLimited, &st.ICMPErrors, &st.KernelDrops}
}

func (c *counters) addTo(st *Stats) {
	for i, f := range statsFields(st) {
		*f += c[i].Load()
	}
}

// packetConn is what the server uses of x/net's ipv4.PacketConn and
// ipv6.PacketConn, whose Message types are one type.
type packetConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
	JoinGroup(ifi *net.Interface, group net.Addr) error
}

// replyControl returns the control message that makes a datagram leave
// from src (unless it is the zero Addr or of the other family) and, if
// ifindex is not 0, out of that interface.
func (l *listener[V]) replyControl(src netip.Addr, ifindex int) []byte {
	v4 := !l.v6
	if src = src.Unmap(); src.Is4() != v4 {
		src = netip.Addr{}
	}
	oob, _ := (&sendControl{src: src, ifindex: ifindex}).marshal(nil, v4)
	return oob
}

// run delivers b, a batch taken over from a reader whose call was handed
// off, if not nil, then reads and handles batches until the socket
// closes, the server stops or a call is handed off. The listener's last
// goroutine retires it.
func (l *listener[V]) run(b *batch[V]) {
	defer l.s.wg.Done()
	defer l.s.exit(l)
	if l.cur = b; b == nil {
		b = l.next()
	}
	for b != nil {
		l.arm()
		if b.deliverRest() {
			// A handed-off batch's timer, and l.cur, are the helper's.
			l.s.end(l, false)
			l.s.putBatch(b)
			return
		}
		l.disarm()
		if l.s.end(l, true) {
			l.release()
			return
		}
		b = l.next()
	}
}

// next reads the next batch and looks it up; nil when the reader is to
// end.
func (l *listener[V]) next() *batch[V] {
	for {
		b, n, err := l.readBatch()
		if err == nil {
			l.window = min(max(2*n, minWindow), len(b.msgs))
			l.begin()
			b.lookUp(n)
			return b
		}
		l.release()
		if l.s.closeDrained(l) || l.closing.Load() || l.stopping.Load() || errors.Is(err, net.ErrClosed) {
			return nil
		}
		// EAGAIN: read dry while draining, then taken back.
		if !errors.Is(err, syscall.EAGAIN) {
			l.c[nReadErrors].Add(1)
			time.Sleep(time.Millisecond) // not a busy loop on a persistent error
		}
	}
}

// batch holds the buffers of one batch of datagrams. A reader takes one
// from the server's pool when its kernel socket has datagrams and gives
// it back when the socket has no more (getBatch, putBatch).
type batch[V any] struct {
	l    *listener[V] // the kernel socket the batch is read from
	msgs []ipv4.Message
	ds   []demux.Datagram // the unicast datagrams of msgs, in order
	out  []*demux.Socket[V]
	kind []kind
	// pk[i] is msgs[i]'s datagram: the buffer it is read into, and then
	// its sender, addressing and payload's length. A Conn takes it
	// whole, and the slot gets a fresh one.
	pk []*packet
	rx *receiver

	// reqs is the unused rest of a slab of Requests, one per handler
	// call: a Request is never reused, so that one kept past its call
	// cannot reach the datagram of a later one. Slabs make one
	// allocation per len(msgs) calls.
	reqs    []Request[V]
	deliver func(*demux.Socket[V], V) bool // LookupMulticast's callback
	// pending are the counts of this batch not yet added to the
	// listener's, by counter: Conn and multicast deliveries (a unicast
	// handler call is counted as it starts, so that its reply never
	// leaves uncounted, even when a hand-off sends it early), and
	// datagrams no socket took.
	pending [nCounts]uint64
	// cur is the message that LookupMulticast's callback delivers, and
	// matched is set when it finds an open receiver.
	cur     int
	matched bool

	// The delivery cursor: the next message to deliver, the next of the
	// unicast lookups, and the batch's size. A helper that takes the
	// batch over starts from them.
	next, nextU, n int
	// state is running, or inCall during a unicast handler call, which
	// a look may turn into handedOff (see handoff.go); calls counts the
	// calls that returned, so that a look sees one that lasts.
	state atomic.Uint32
	calls atomic.Uint64
	seen  uint64           // calls at the last look, plus 1; under l.looking
	sock  *demux.Socket[V] // the socket of the call in progress
	// deferred are datagrams for sock that came after the hand-off, for
	// this batch's goroutine to handle after its call; under l.mu.
	deferred []*packet

	// mu orders Reply, which may run on a goroutine of the handler's,
	// with the reader's queueing and with the end of each handler call.
	mu      sync.Mutex
	replies []ipv4.Message
	rbufs   [][]byte
	nreply  int
}

type kind uint8

const (
	skip kind = iota
	unicast
	multicast
	// copied is a multicast or broadcast datagram read by a reader
	// other than its family's first, which delivers its own copy.
	copied
)

// newBatch makes a batch for s's readers, with Options.Batch buffers of
// Options.MaxDatagram bytes for reads and as many for replies, and room
// for either family's control messages, so that any kernel socket's
// reader can use it.
func newBatch[V any](s *Server[V]) *batch[V] {
	n, size := s.opts.Batch, s.opts.MaxDatagram
	oob := max(len(ipv6.NewControlMessage(ipv6.FlagDst|ipv6.FlagInterface)),
		len(ipv4.NewControlMessage(ipv4.FlagDst|ipv4.FlagInterface))) + oobSpace
	b := &batch[V]{
		msgs: make([]ipv4.Message, n), ds: make([]demux.Datagram, 0, n),
		out: make([]*demux.Socket[V], n), kind: make([]kind, n), pk: make([]*packet, n),
		replies: make([]ipv4.Message, n), rbufs: make([][]byte, n), rx: newReceiver(n),
	}
	for i := range b.msgs {
		b.pk[i] = &packet{buf: make([]byte, size)}
		b.msgs[i].Buffers = [][]byte{b.pk[i].buf}
		b.msgs[i].OOB = make([]byte, oob)
		b.rbufs[i] = make([]byte, 0, size)
	}
	b.deliver = func(s *demux.Socket[V], v V) bool {
		if b.l.s.opts.PerAddress {
			if o := s.Options(); !b.l.covers(o.Addr, o.V6Only) {
				b.matched = true // another kernel socket's copy is for s
				return true
			}
		}
		open, call := b.deliverTo(s, b.cur, true)
		if call {
			b.call(b.request(b.pk[b.cur], s, v))
			b.pending[nDelivered]++
		}
		b.matched = b.matched || open
		return true
	}
	return b
}

// batches are the readers' buffers, shared by every kernel socket's
// readers: a reader holds a batch only while its socket has datagrams
// queued or its batch is being handled, so that an idle port costs no
// buffers (see readBatch). The last keep batches given back stay in free
// for good, since sync.Pool drops what it holds at garbage collections
// (and some of it at random under the race detector), and a reader that
// wakes would then allocate a whole batch; those past keep go to pool,
// for readers that wake at once across many ports.
type batches[V any] struct {
	mu   sync.Mutex
	free []*batch[V]
	keep int
	pool sync.Pool
}

// getBatch returns a batch for l, from the server's batches or new.
func (s *Server[V]) getBatch(l *listener[V]) *batch[V] {
	bs := &s.batches
	var b *batch[V]
	bs.mu.Lock()
	if n := len(bs.free); n > 0 {
		b = bs.free[n-1]
		bs.free = slices.Delete(bs.free, n-1, n) // clears the slot
	}
	bs.mu.Unlock()
	if b == nil {
		var ok bool
		if b, ok = bs.pool.Get().(*batch[V]); !ok {
			b = newBatch(s)
		}
	}
	// What the batch's last use left: a handed-off call's goroutine
	// leaves its state at handedOff, and its socket.
	b.l, b.sock, b.deferred, b.seen = l, nil, nil, 0
	b.state.Store(running)
	return b
}

// putBatch gives back b, which no goroutine uses any more. Every look
// that may have found it (as l.active, or handing its call off) has
// ended first, so that none looks at it once another reader has it.
func (s *Server[V]) putBatch(b *batch[V]) {
	l := b.l
	// Not a Store: a look may have just made a helper's batch active.
	l.active.CompareAndSwap(b, nil)
	// Waits for a look under way.
	l.looking.Lock()
	//lint:ignore SA2001 the empty section is the wait
	l.looking.Unlock()
	s.batches.put(b)
}

// put gives back b, which no look knows.
func (bs *batches[V]) put(b *batch[V]) {
	b.l = nil
	bs.mu.Lock()
	if len(bs.free) < bs.keep {
		bs.free = append(bs.free, b)
		b = nil
	}
	bs.mu.Unlock()
	if b != nil {
		bs.pool.Put(b)
	}
}

// take returns the batch of l's reader, taking one from the server's
// batches if it has none.
func (l *listener[V]) take() *batch[V] {
	if l.cur == nil {
		l.cur = l.s.getBatch(l)
		l.active.Store(l.cur)
	}
	return l.cur
}

// release returns the batch of l's reader, which has nothing to handle,
// to the pool.
func (l *listener[V]) release() {
	if b := l.cur; b != nil {
		l.cur = nil
		l.s.putBatch(b)
	}
}

// minWindow is the fewest message slots a read offers the kernel. The
// window (listener.window) is how many the next read offers: twice as
// many as the last read filled, within minWindow and Options.Batch.
// Every slot offered is prepared for the call (header, iovecs, address
// buffer) whether or not a datagram fills it, and a reader that keeps up
// with its senders reads only a few datagrams per call: preparing a
// whole batch each time would cost about as much as handling the
// datagrams. A full read doubles the window, so that a burst gets
// full-size reads again after a few calls.
const minWindow = 8

// lookUp parses and counts the n datagrams just read and looks up the
// receivers of the unicast ones, for deliverRest.
func (b *batch[V]) lookUp(n int) {
	l := b.l
	copies, mcast := 0, 0
	b.ds = b.ds[:0]
	for i := range n {
		switch b.kind[i] = b.parse(i); b.kind[i] {
		case unicast:
			p := b.pk[i]
			b.ds = append(b.ds, demux.Datagram{Src: p.src, Dst: netip.AddrPortFrom(p.dst, l.port), Ifindex: p.ifindex, Payload: p.buf[:p.n]})
		case copied:
			copies++
		case multicast:
			mcast++
		}
	}
	uncounted := copies
	if mcast != 0 && l.s.opts.PerAddress && !l.addr.IsUnspecified() && l.s.hasWildcard(l.port, l.v6) {
		uncounted += mcast // the wildcard's kernel socket counts its copy
	}
	l.c[nReceived].Add(uint64(n - uncounted))
	if copies != 0 {
		l.c[nCopies].Add(uint64(copies))
	}
	if len(b.ds) > 0 {
		l.s.t.LookupBatch(b.ds, b.out)
	}
	b.next, b.nextU, b.n = 0, 0, n
}

// deliverRest delivers the batch from its cursor on, in arrival order,
// then counts it and sends its replies. When a look hands the rest
// of the batch to a helper during a handler call, it stops after that
// call, finishes what the hand-off left it (handedOff) and reports true:
// the goroutine is no longer its listener's reader.
func (b *batch[V]) deliverRest() bool {
	l := b.l
	for b.next < b.n {
		i := b.next
		b.next++
		switch b.kind[i] {
		case unicast:
			s := b.out[b.nextU]
			b.out[b.nextU] = nil
			b.nextU++
			open, call := s != nil, false
			if open {
				open, call = b.deliverTo(s, i, false)
			}
			if !open {
				b.pending[nUnmatched]++
				b.unreachable(i)
			} else if call && b.callUnicast(b.request(b.pk[i], s, s.Value())) {
				b.handedOff()
				return true
			}
		case multicast:
			b.cur, b.matched = i, false
			p := b.pk[i]
			l.s.t.LookupMulticast(p.src, netip.AddrPortFrom(p.dst, l.port), p.ifindex, b.deliver)
			if !b.matched {
				b.pending[nUnmatchedMulti]++
			}
		}
	}
	b.finish()
	return false
}

// deliverTo gives msgs[i] to s, a receiver of it (of a multicast
// datagram if mcast): to its Conn, or to its handed-off call (deferTo),
// or counts it unhandled when the server has no handler. It reports
// whether s was still open, and whether the handler is to be called.
func (b *batch[V]) deliverTo(s *demux.Socket[V], i int, mcast bool) (open, call bool) {
	l := b.l
	// A socket that closed since the lookup (a handler of this batch may
	// have closed it) receives nothing, through its Conn neither, which
	// learns of a close through the table only later. Closed is asked
	// after connOf: a Conn's Close closes the socket before it forgets
	// the Conn, so a socket found without one is seen closed if it was.
	c := l.s.connOf(s)
	if s.Closed() {
		return false, false
	}
	switch {
	case c != nil && mcast:
		// A copy: the other receivers read the buffer too.
		if p := b.copyOf(i); !c.push(p) {
			c.pool.Put(p)
		}
		b.pending[nDelivered]++
	case c != nil:
		// The packet goes to c's queue whole, and the slot gets a fresh
		// buffer for the next read, so that the datagram is not copied.
		if c.push(b.pk[i]) {
			b.pk[i] = l.s.getPacket()
			b.msgs[i].Buffers[0] = b.pk[i].buf
		}
		b.pending[nDelivered]++
	case l.s.h == nil:
		b.pending[nUnhandled]++
	case l.nstuck.Load() != 0 && l.deferTo(s, b, i):
		// A socket whose call was handed off gets it after that call.
	default:
		return true, true
	}
	return true, false
}

// finish adds the batch's counts to the listener's, one atomic add each,
// not one per datagram, and then sends its replies: a client that has
// its reply finds its datagram counted.
func (b *batch[V]) finish() {
	for i, n := range b.pending {
		if n != 0 {
			b.l.c[i].Add(n)
		}
	}
	clear(b.pending[:])
	b.mu.Lock()
	b.flush()
	b.mu.Unlock()
}

// callUnicast runs the handler for r, a unicast datagram's, in a way that
// lets a look hand the rest of the batch to a helper while it runs;
// it reports whether it did.
func (b *batch[V]) callUnicast(r *Request[V]) bool {
	b.l.c[nDelivered].Add(1)
	b.sock = r.Socket
	b.state.Store(inCall)
	b.call(r)
	handed := !b.state.CompareAndSwap(inCall, running)
	b.calls.Add(1)
	return handed
}

// request returns a new Request, never handed out before, for p, a
// datagram for s, whose value is v.
func (b *batch[V]) request(p *packet, s *demux.Socket[V], v V) *Request[V] {
	if len(b.reqs) == 0 {
		b.reqs = make([]Request[V], len(b.msgs))
	}
	r := &b.reqs[0]
	b.reqs = b.reqs[1:]
	*r = Request[V]{
		Payload: p.buf[:p.n], Src: p.src, Dst: netip.AddrPortFrom(p.dst, b.l.port), Ifindex: p.ifindex,
		Multicast: p.mcast, Socket: s, Value: v, b: b,
	}
	return r
}

// call runs the handler for r, then closes r to Reply.
func (b *batch[V]) call(r *Request[V]) {
	b.l.s.h(r)
	b.mu.Lock()
	r.done = true
	b.mu.Unlock()
}

// unreachable answers the unmatched unicast datagram msgs[i] with a port
// unreachable, if the server sends them.
func (b *batch[V]) unreachable(i int) {
	ic := b.l.s.icmp
	if ic == nil {
		return
	}
	p := b.pk[i]
	switch sent, limited, err := ic.unreachable(p.src, netip.AddrPortFrom(p.dst, b.l.port), p.ifindex, p.buf[:p.n]); {
	case err != nil:
		b.l.c[nICMPErrors].Add(1)
	case sent:
		b.l.c[nICMPSent].Add(1)
	case limited:
		b.l.c[nICMPLimited].Add(1)
	}
}

// parse reads the addressing of msgs[i] into pk[i] and says how to
// deliver it.
func (b *batch[V]) parse(i int) kind {
	l, m, p := b.l, &b.msgs[i], b.pk[i]
	c := parseControl(m.OOB[:m.NN], l.v6)
	if c.hasDrop {
		l.c[nKernelDrops].Store(uint64(c.drops))
	}
	if m.Flags&msgTrunc != 0 {
		l.c[nTruncated].Add(1)
		return skip
	}
	if !p.src.IsValid() || !c.ok {
		return skip
	}
	if !l.v6 {
		p.src = netip.AddrPortFrom(p.src.Addr().Unmap(), p.src.Port())
	}
	p.n, p.dst, p.ifindex, p.specDst, p.tos, p.mcast = m.N, c.dst, c.ifindex, c.specDst, c.tos, false
	if c.dst.IsMulticast() || (c.dst.Is4() && l.s.isBroadcast(c.dst, c.ifindex, c.specDst)) {
		if l.more.Load() {
			return copied
		}
		p.mcast = true
		return multicast
	}
	return unicast
}

// copyOf returns a copy of msgs[i] in a packet of the server's pool.
func (b *batch[V]) copyOf(i int) *packet {
	p := b.l.s.getPacket()
	b.pk[i].copyTo(p)
	return p
}

// queue copies p into the batch's replies to r.Src. It runs under b.mu.
func (b *batch[V]) queue(r *Request[V], p []byte) {
	if b.nreply == len(b.replies) {
		b.flush()
	}
	k := b.nreply
	b.nreply++
	buf := append(b.rbufs[k][:0], p...)
	b.rbufs[k] = buf
	var src netip.Addr
	ifindex := 0
	if r.Multicast {
		ifindex = r.Ifindex
	} else {
		src = r.Dst.Addr()
		if src.Is6() && (src.IsLinkLocalUnicast() || src.IsLinkLocalMulticast()) {
			ifindex = r.Ifindex
		}
	}
	b.replies[k] = ipv4.Message{
		Buffers: [][]byte{buf},
		OOB:     b.l.replyControl(src, ifindex),
		Addr:    net.UDPAddrFromAddrPort(r.Src),
	}
}

// flush sends the queued replies. A reply that fails is counted and
// skipped. It runs under b.mu.
func (b *batch[V]) flush() {
	ms := b.replies[:b.nreply]
	for len(ms) > 0 {
		n, err := b.l.pc.WriteBatch(ms, 0)
		n = max(n, 0) // x/net reports -1 with an error on the first message
		b.l.c[nReplies].Add(uint64(n))
		ms = ms[n:]
		if err != nil {
			b.l.c[nReplyErrors].Add(1)
			ms = ms[min(1, len(ms)):]
		}
	}
	b.nreply = 0
}
