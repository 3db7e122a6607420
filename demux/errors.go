package demux

import (
	"fmt"
	"net/netip"
)

// OpError is the error of a table operation. Its Err wraps the errno, so
// errors.Is(err, syscall.EADDRINUSE) and the like work.
type OpError struct {
	Op   string         // "new", "bind", "connect", "disconnect", "setdevice" or "close"
	Addr netip.AddrPort // the local address concerned, if known
	Err  error
}

// Error describes the failed operation.
func (e *OpError) Error() string {
	if e.Addr.IsValid() {
		return fmt.Sprintf("udpdemux: %s %v: %v", e.Op, e.Addr, e.Err)
	}
	return fmt.Sprintf("udpdemux: %s: %v", e.Op, e.Err)
}

// Unwrap returns the underlying error.
func (e *OpError) Unwrap() error { return e.Err }

func opError(op string, o Options, err error) error {
	return &OpError{Op: op, Addr: netip.AddrPortFrom(o.Addr, o.Port), Err: err}
}

func (s *Socket[V]) opError(op string, err error) error {
	return &OpError{Op: op, Addr: s.LocalAddr(), Err: err}
}

// newError is an error of New: a config it refuses.
func newError(format string, args ...any) error {
	return &OpError{Op: "new", Err: fmt.Errorf(format, args...)}
}
