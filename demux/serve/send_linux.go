package serve

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// gsoSegments is the most datagrams one segmented send carries
	// (Linux's UDP_MAX_SEGMENTS, 64 before 6.x kernels raised it).
	gsoSegments = 64
	// gsoBytes is the most payload bytes of one segmented send, below
	// the 64 KiB an IP packet may carry with its headers.
	gsoBytes = 65000
)

// sender is a Conn's writer's view of the kernel sockets: it sends the
// queued datagrams with sendmmsg, each run of datagrams of one size (the
// last may be shorter) to one peer with the same control messages as one
// message with UDP_SEGMENT when the kernel takes it. Its headers, vectors
// and address buffers are allocated once.
type sender struct {
	k4       *net.UDPConn
	rc4, rc6 syscall.RawConn
	gso      bool // the kernel segments, as far as we know
	hdrs     [sendSlots]unix.Mmsghdr
	iovs     [sendSlots]unix.Iovec
	names    [sendSlots]unix.RawSockaddrInet6
	ctrl     [sendSlots][sendOOB]byte
	groups   [sendSlots]int // datagrams per message
	msgs     int            // messages sent, for tests
	// call is the system call that rc.Write runs, made once (see
	// receiver); its arguments and results are the fields after it.
	call  func(fd uintptr) bool
	want  int
	got   int
	errno syscall.Errno
}

func newSender(c *Conn) *sender {
	s := &sender{k4: c.k4}
	s.call = s.sendmmsg
	open := func(k *net.UDPConn) syscall.RawConn {
		if k == nil {
			return nil
		}
		rc, err := k.SyscallConn()
		if err != nil {
			return nil // closed: its datagrams fail
		}
		s.gso = s.gso || probeGSO(rc)
		return rc
	}
	s.rc4, s.rc6 = open(c.k4), open(c.k6)
	return s
}

// probeGSO reports whether the kernel knows UDP_SEGMENT.
func probeGSO(rc syscall.RawConn) bool {
	if os.Getenv("UDPDEMUX_DISABLE_GSO") != "" {
		return false
	}
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		_, err = unix.GetsockoptInt(int(fd), solUDP, udpSegment)
	}); cerr != nil {
		return false
	}
	return err == nil
}

func (s *sender) sendmmsg(fd uintptr) bool {
	for {
		r1, _, e := syscall.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.hdrs[0])), uintptr(s.want), 0, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until the socket takes more
		}
		s.got, s.errno = int(r1), e
		return true
	}
}

// send sends the n queued datagrams from ring index head, which are the
// writer's while it runs, and returns the first error a datagram met.
func (s *sender) send(q *sendQueue, head, n int) error {
	var first error
	ent := func(i int) *sendEntry { return &q.ents[(head+i)%len(q.ents)] }
	for i := 0; i < n; {
		// A run of datagrams through one kernel socket.
		k := ent(i).k
		j := i + 1
		for j < n && ent(j).k == k {
			j++
		}
		rc := s.rc4
		if k != s.k4 {
			rc = s.rc6
		}
		if err := s.sendRun(rc, ent, i, j); err != nil && first == nil {
			first = err
		}
		i = j
	}
	return first
}

// sendRun sends the datagrams ent(i) to ent(j-1), all through rc.
func (s *sender) sendRun(rc syscall.RawConn, ent func(int) *sendEntry, i, j int) error {
	if rc == nil {
		return syscall.EBADF
	}
	var first error
	plain := i // datagrams before it are sent one per message
	for pos := i; pos < j; {
		m := 0
		for p := pos; p < j && m < len(s.hdrs); m++ {
			e := ent(p)
			cnt := 1
			if s.gso && p >= plain {
				cnt = s.group(ent, p, j)
			}
			for x := range cnt {
				b := ent(p + x).buf
				s.iovs[p-i+x].Base = unsafe.SliceData(b)
				s.iovs[p-i+x].SetLen(len(b))
			}
			h := &s.hdrs[m].Hdr
			h.Name = (*byte)(unsafe.Pointer(&s.names[m]))
			h.Namelen = sockaddr(&s.names[m], e.to)
			h.Iov = &s.iovs[p-i]
			h.SetIovlen(cnt)
			oob := append(s.ctrl[m][:0], e.oob[:e.oobn]...)
			if cnt > 1 {
				var d [2]byte
				binary.NativeEndian.PutUint16(d[:], uint16(len(e.buf)))
				oob = appendCmsg(oob, solUDP, udpSegment, d[:])
			}
			// With no control messages the kernel reads none from Control.
			h.Control = unsafe.SliceData(oob)
			h.SetControllen(len(oob))
			h.Flags = 0
			s.groups[m] = cnt
			p += cnt
		}
		s.want, s.got, s.errno = m, 0, 0
		if err := rc.Write(s.call); err != nil {
			return err // the kernel socket closed
		}
		if s.errno == 0 {
			s.msgs += s.got
			for _, g := range s.groups[:s.got] {
				pos += g
			}
			continue
		}
		// The first message failed.
		g := s.groups[0]
		if g > 1 {
			// Send its datagrams one by one, and if the kernel cannot
			// segment for this device (EIO: no checksum offload), no
			// more segmented sends.
			if s.errno == syscall.EIO {
				s.gso = false
			}
			plain = pos + g
			continue
		}
		if first == nil {
			first = os.NewSyscallError("sendmmsg", s.errno)
		}
		pos += g
	}
	return first
}

// group returns how many datagrams from ent(p), before ent(j), one
// segmented send carries: those that follow it to the same peer with the
// same control messages and its size, and one shorter to end them.
func (s *sender) group(ent func(int) *sendEntry, p, j int) int {
	e := ent(p)
	seg := len(e.buf)
	if seg == 0 {
		return 1
	}
	total, cnt := seg, 1
	for p+cnt < j && cnt < gsoSegments {
		f := ent(p + cnt)
		if f.to != e.to || len(f.buf) == 0 || len(f.buf) > seg || total+len(f.buf) > gsoBytes ||
			string(f.oob[:f.oobn]) != string(e.oob[:e.oobn]) {
			break
		}
		cnt++
		total += len(f.buf)
		if len(f.buf) < seg {
			break
		}
	}
	return cnt
}

// sockaddr writes to into sa as the kernel takes it, and returns its
// length.
func sockaddr(sa *unix.RawSockaddrInet6, to netip.AddrPort) uint32 {
	a := to.Addr()
	if a.Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:], to.Port())
		return unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
	if z := a.Zone(); z != "" {
		if id, err := strconv.ParseUint(z, 10, 32); err == nil {
			sa.Scope_id = uint32(id)
		} else if ifi, err := net.InterfaceByName(z); err == nil {
			sa.Scope_id = uint32(ifi.Index)
		}
	}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], to.Port())
	return unix.SizeofSockaddrInet6
}
