package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/udpdemux/udpdemux/demux"
)

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
	p4   *ipv4.PacketConn // one of p4 and p6 is set
	p6   *ipv6.PacketConn
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
	// while the watcher holds it (watcher.go), and looking keeps two
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

// counters are a listener's counts, written by its reader.
type counters struct {
	received, delivered, unmatched, unmatchedMulti, truncated atomic.Uint64
	replies, replyErrors, readErrors, unhandled               atomic.Uint64
	icmpSent, icmpLimited, icmpErrors                         atomic.Uint64
	kernelDrops                                               atomic.Uint32 // SO_RXQ_OVFL: the socket's running total
	// copies counts the multicast and broadcast datagrams that a reader
	// other than its family's first dropped (Options.Readers): its
	// tests read it, to see that the kernel copies them to each socket.
	copies atomic.Uint64
}

func (c *counters) addTo(st *Stats) {
	st.Received += c.received.Load()
	st.Delivered += c.delivered.Load()
	st.Unmatched += c.unmatched.Load()
	st.UnmatchedMulticast += c.unmatchedMulti.Load()
	st.Truncated += c.truncated.Load()
	st.Replies += c.replies.Load()
	st.ReplyErrors += c.replyErrors.Load()
	st.ReadErrors += c.readErrors.Load()
	st.Unhandled += c.unhandled.Load()
	st.ICMPSent += c.icmpSent.Load()
	st.ICMPLimited += c.icmpLimited.Load()
	st.ICMPErrors += c.icmpErrors.Load()
	st.KernelDrops += uint64(c.kernelDrops.Load())
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
		l := &listener[V]{s: s, port: k.port, addr: k.addr, conn: pc.(*net.UDPConn), window: s.opts.Batch}
		l.more.Store(more)
		if err = l.setup(v6); err == nil {
			return l, nil
		}
		_ = l.conn.Close()
	}
	return nil, fmt.Errorf("kernel socket %v: %w", addr, err)
}

// setup claims the port for l's socket, just bound, steers flows among
// its group's readers, and asks for each datagram's packet info.
func (l *listener[V]) setup(v6 bool) error {
	s := l.s
	var err, serr error
	if l.rc, err = l.conn.SyscallConn(); err != nil {
		return err
	}
	if err = l.rc.Control(func(fd uintptr) {
		serr = claimPort(int(fd))
		if serr == nil && s.opts.Readers > 1 {
			// A kernel that refuses the program spreads by its own hash,
			// which still keeps each flow to one reader.
			_ = steerFlows(int(fd), v6, s.opts.Readers)
		}
	}); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	if v6 {
		l.p6 = ipv6.NewPacketConn(l.conn)
		err = l.p6.SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
	} else {
		l.p4 = ipv4.NewPacketConn(l.conn)
		err = l.p4.SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true)
	}
	if err != nil {
		return fmt.Errorf("packet info: %w", err)
	}
	return nil
}

// writeBatch sends the messages (sendmmsg).
func (l *listener[V]) writeBatch(ms []ipv4.Message) (int, error) {
	if l.p6 != nil {
		return l.p6.WriteBatch(ms, 0)
	}
	return l.p4.WriteBatch(ms, 0)
}

// replyControl returns the control message that makes a datagram leave
// from src (unless it is the zero Addr or of the other family) and, if
// ifindex is not 0, out of that interface.
func (l *listener[V]) replyControl(src netip.Addr, ifindex int) []byte {
	v4 := l.p6 == nil
	if src = src.Unmap(); src.Is4() != v4 {
		src = netip.Addr{}
	}
	oob, _ := (&sendControl{src: src, ifindex: ifindex}).marshal(nil, v4)
	return oob
}

// shut closes l's socket, for good: its reader's next failed read is its
// last.
func (l *listener[V]) shut() {
	l.closing.Store(true)
	_ = l.conn.Close()
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
		handed := b.deliverRest()
		if !handed {
			l.disarm() // a handed-off batch's timer is its helper's
		}
		if l.s.end(l, !handed) || handed {
			if handed {
				l.s.putBatch(b) // l.cur is the helper's
			} else {
				l.release()
			}
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
			l.c.readErrors.Add(1)
			time.Sleep(time.Millisecond) // not a busy loop on a persistent error
		}
	}
}
