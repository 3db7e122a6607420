package serve

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv4"
)

// receiver reads batches with recvmmsg itself rather than through x/net's
// ReadBatch, which allocates each datagram's sender as a *net.UDPAddr
// and its IP (two objects per datagram, whose only use here was to be
// turned into a netip.AddrPort). Its headers, vectors and address buffers
// are allocated once, for the batch's slots.
type receiver struct {
	rc    syscall.RawConn
	hdrs  []mmsghdr
	iovs  []syscall.Iovec
	names []syscall.RawSockaddrInet6 // room for either family's address
	// call is the system call that rc.Read runs, made once: a closure
	// made per read would escape to the heap with what it captures. Its
	// arguments and results are the fields after it.
	call  func(fd uintptr) bool
	want  int
	got   int
	errno syscall.Errno
}

// mmsghdr is Linux's struct mmsghdr; Go pads it as C does on each
// architecture.
type mmsghdr struct {
	hdr syscall.Msghdr
	n   uint32
}

func newReceiver(conn *net.UDPConn, n int) (*receiver, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &receiver{rc: rc, hdrs: make([]mmsghdr, n), iovs: make([]syscall.Iovec, n), names: make([]syscall.RawSockaddrInet6, n)}
	r.call = r.recvmmsg
	return r, nil
}

// recvmmsg reads up to r.want datagrams into r.hdrs, and reports false
// when none is queued, so that rc.Read waits for one.
func (r *receiver) recvmmsg(fd uintptr) bool {
	for {
		r1, _, e := syscall.Syscall6(syscall.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), 0, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.got, r.errno = int(r1), e
		return true
	}
}

// recv reads up to len(ms) datagrams into the buffers and OOB of ms,
// setting their N, NN and Flags, and each sender in src. It waits, as a
// read on the socket does, until a datagram arrives, the read deadline
// passes or the socket closes.
func (r *receiver) recv(ms []ipv4.Message, src []netip.AddrPort) (int, error) {
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
	r.want, r.got, r.errno = len(ms), 0, 0
	if err := r.rc.Read(r.call); err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, os.NewSyscallError("recvmmsg", r.errno)
	}
	n := r.got
	for i := range n {
		h := &r.hdrs[i]
		ms[i].N, ms[i].NN, ms[i].Flags = int(h.n), int(h.hdr.Controllen), int(h.hdr.Flags)
		src[i] = sockaddrAddrPort(&r.names[i])
	}
	return n, nil
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
