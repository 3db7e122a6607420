package demuxtest

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"

	"github.com/udpdemux/udpdemux/demux"
)

// Kind is what an op does.
type Kind uint8

// The kinds of op, each a call of the table (and the model's counterpart).
const (
	Bind       Kind = iota // Table.Bind
	Connect                // Table.Connect
	Close                  // Table.Close
	Lookup                 // Table.Lookup
	Multicast              // Table.LookupMulticast
	Disconnect             // Table.Disconnect
	SetDevice              // Table.SetDevice, to interface Ifindex
)

// hasRef reports whether ops of kind k name their socket by Ref.
func (k Kind) hasRef() bool { return k == Connect || k == Close || k == Disconnect || k == SetDevice }

// Op is one step of a sequence. Connect and close name their socket by the
// index of the bind op that made it, so that a shrunk sequence still makes
// sense: a step whose socket does not exist is skipped.
type Op struct {
	Kind    Kind           // what the op does
	Opts    demux.Options  // Bind; Port 0 is bind(0)
	Ref     int            // Connect, Close, Disconnect, SetDevice: index of the bind op
	Remote  netip.AddrPort // Connect
	Local   netip.Addr     // Connect
	Src     netip.AddrPort // Lookup, Multicast: the datagram's source
	Dst     netip.AddrPort // Lookup, Multicast: the datagram's destination
	Ifindex int            // Lookup, Multicast; SetDevice: the device
	// Port0 is the port the table chose for a bind(0) in the original
	// run; shrinking turns such binds into explicit ones, to replay
	// deterministically.
	Port0 uint16
}

// String describes the op, as a shrunk sequence prints it.
func (o Op) String() string {
	switch o.Kind {
	case Bind:
		opt := o.Opts
		var b strings.Builder
		fmt.Fprintf(&b, "Bind{Addr: %s, Port: %d", opt.Addr, opt.Port)
		if opt.ReuseAddr {
			b.WriteString(", ReuseAddr")
		}
		if opt.ReusePort {
			fmt.Fprintf(&b, ", ReusePort(owner %d)", opt.Owner)
		} else if opt.Owner != 0 {
			fmt.Fprintf(&b, ", Owner %d", opt.Owner)
		}
		if opt.Device != 0 {
			fmt.Fprintf(&b, ", Device %d", opt.Device)
		}
		if opt.V6Only {
			b.WriteString(", V6Only")
		}
		b.WriteString("}")
		return b.String()
	case Connect:
		return fmt.Sprintf("Connect(sock of op %d, remote %v, local %v)", o.Ref, o.Remote, o.Local)
	case Close:
		return fmt.Sprintf("Close(sock of op %d)", o.Ref)
	case Disconnect:
		return fmt.Sprintf("Disconnect(sock of op %d)", o.Ref)
	case SetDevice:
		return fmt.Sprintf("SetDevice(sock of op %d, %d)", o.Ref, o.Ifindex)
	case Lookup:
		return fmt.Sprintf("Lookup(%v -> %v, if %d)", o.Src, o.Dst, o.Ifindex)
	default:
		return fmt.Sprintf("LookupMulticast(%v -> %v, if %d)", o.Src, o.Dst, o.Ifindex)
	}
}

// Mismatch is a disagreement between model and table; Kind groups them so
// that shrinking keeps looking for the same disagreement.
type Mismatch struct {
	// Kind names the answer that disagreed: "bind", "lookup", "verify"...
	Kind string
	msg  string
}

// Error says what disagreed.
func (m *Mismatch) Error() string { return m.Kind + ": " + m.msg }

func mismatchf(kind, format string, args ...any) *Mismatch {
	return &Mismatch{Kind: kind, msg: fmt.Sprintf(format, args...)}
}

// NotErrno is what Errno returns for an error that wraps no errno (always
// a mismatch: the library's errors all wrap one).
const NotErrno = ^syscall.Errno(0)

// Errno returns the errno that err wraps: 0 for nil, NotErrno for an error
// that wraps none.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return NotErrno
}

// ErrnoName names an errno the way the tests print and count answers:
// "ok" for none, "non-errno error" for NotErrno, the constant's name for
// the errnos that the table and Linux give for UDP sockets, the number and
// message for any other.
func ErrnoName(e syscall.Errno) string {
	switch e {
	case 0:
		return "ok"
	case NotErrno:
		return "non-errno error"
	case syscall.EADDRINUSE:
		return "EADDRINUSE"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EADDRNOTAVAIL:
		return "EADDRNOTAVAIL"
	case syscall.EAFNOSUPPORT:
		return "EAFNOSUPPORT"
	case syscall.ENETUNREACH:
		return "ENETUNREACH"
	case syscall.EBADF:
		return "EBADF"
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}

// Format prints a sequence, one op a line.
func Format(ops []Op) string {
	var b strings.Builder
	for i, o := range ops {
		fmt.Fprintf(&b, "  op %d: %v\n", i, o)
	}
	return b.String()
}
