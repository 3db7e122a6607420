package serve

import (
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv4"
)

// receiver reads batches with recvmmsg itself rather than through x/net's
// ReadBatch, which allocates each datagram's sender as a *net.UDPAddr
// and its IP, only for the reader to turn it into a netip.AddrPort. Its
// headers, vectors and address buffers
// are allocated once, for the batch's slots, and go with the batch from
// one kernel socket's reader to another's.
type receiver struct {
	hdrs  []mmsghdr
	iovs  []syscall.Iovec
	names []syscall.RawSockaddrInet6 // room for either family's address
}

// mmsghdr is Linux's struct mmsghdr; Go pads it as C does on each
// architecture.
type mmsghdr struct {
	hdr syscall.Msghdr
	n   uint32
}

func newReceiver(n int) *receiver {
	return &receiver{hdrs: make([]mmsghdr, n), iovs: make([]syscall.Iovec, n), names: make([]syscall.RawSockaddrInet6, n)}
}

// prepare points the first len(ms) headers at the buffers and OOB of ms.
func (r *receiver) prepare(ms []ipv4.Message) {
	for i := range ms {
		buf, oob := ms[i].Buffers[0], ms[i].OOB
		r.iovs[i].Base = unsafe.SliceData(buf)
		r.iovs[i].SetLen(len(buf))
		h := &r.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Namelen = syscall.SizeofSockaddrInet6
		h.Iov = &r.iovs[i]
		h.Iovlen = 1
		h.Control = unsafe.SliceData(oob)
		h.SetControllen(len(oob))
		h.Flags = 0
	}
}

// recvmmsg reads up to want datagrams from fd, which does not block,
// into the prepared headers. It is a raw system call, which the runtime
// does not see: a read that never blocks need not give up the reader's P.
// With a full queue, a read of a whole batch lasts long enough that the
// runtime would hand the P to another thread during each one and take it
// back after, which costs busy readers much of a core. The price: a
// garbage collection's stop waits for a read in progress to end.
func (r *receiver) recvmmsg(fd uintptr, want int) (int, syscall.Errno) {
	for {
		r1, _, e := syscall.RawSyscall6(syscall.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(want), syscall.MSG_DONTWAIT, 0, 0)
		if e != syscall.EINTR {
			return int(r1), e
		}
	}
}

// finish sets the N, NN and Flags of the first n of ms, which a read
// filled, and the sender of each of their packets pk.
func (r *receiver) finish(ms []ipv4.Message, pk []*packet, n int) {
	for i := range n {
		h := &r.hdrs[i]
		ms[i].N, ms[i].NN, ms[i].Flags = int(h.n), int(h.hdr.Controllen), int(h.hdr.Flags)
		pk[i].src = sockaddrAddrPort(&r.names[i])
	}
}

// readBatch waits, as a read on the kernel socket does, until a datagram
// arrives, the read deadline passes or the socket closes, and returns
// the reader's batch with the datagrams read into its first n messages.
// An idle reader holds no batch: it waits in rc.Read with a callback
// (tryRead) that takes one from the server's pool only once the socket
// is readable, and gives it back when the socket has nothing more.
func (l *listener[V]) readBatch() (*batch[V], int, error) {
	l.got, l.errno = 0, 0
	if l.readFn == nil {
		l.readFn = l.tryRead // once: one made per read would escape to the heap
	}
	if err := l.rc.Read(l.readFn); err != nil {
		return nil, 0, err
	}
	b := l.cur
	if l.errno != 0 {
		return b, 0, os.NewSyscallError("recvmmsg", l.errno)
	}
	b.rx.finish(b.msgs, b.pk, l.got)
	return b, l.got, nil
}

// drainsQueue says that a reader can read its socket's queue dry before
// the socket closes (Server.end).
const drainsQueue = true

// tryRead is readBatch's call of rc.Read: it reads into the reader's
// batch, taking one if it has none, and reports false when nothing is
// queued, so that rc.Read waits for the socket to become readable; the
// batch goes back to the pool meanwhile.
func (l *listener[V]) tryRead(fd uintptr) bool {
	b := l.take()
	want := min(l.window, len(b.msgs))
	b.rx.prepare(b.msgs[:want])
	n, e := b.rx.recvmmsg(fd, want)
	if e == syscall.EAGAIN {
		l.release()
		if l.draining.Load() {
			// Read dry: the read fails, and the reader closes the
			// socket (Server.closeDrained) unless it was taken back.
			l.got, l.errno = 0, syscall.EAGAIN
			return true
		}
		return false
	}
	l.got, l.errno = n, e
	if e != 0 {
		l.got = 0
	}
	return true
}

// sockaddrAddrPort returns the address and port of sa, an AF_INET or
// AF_INET6 socket address; the zero AddrPort for another family. An IPv6
// address's scope becomes its zone, as a decimal interface index.
func sockaddrAddrPort(sa *syscall.RawSockaddrInet6) netip.AddrPort {
	port := func(p *uint16) uint16 {
		b := (*[2]byte)(unsafe.Pointer(p))
		return uint16(b[0])<<8 | uint16(b[1])
	}
	switch sa.Family {
	case syscall.AF_INET:
		sa4 := (*syscall.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port(&sa4.Port))
	case syscall.AF_INET6:
		a := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10))
		}
		return netip.AddrPortFrom(a, port(&sa.Port))
	}
	return netip.AddrPort{}
}
