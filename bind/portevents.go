package bind

import (
	"iter"
	"math/bits"
)

// Claim is called, with p's lock held, once a new socket on p
// has passed its conflict check and before it is published. If p holds no
// socket, it tells OnPort that p comes into use and returns OnPort's error:
// a non-nil error vetoes the bind, which must then leave the tables as
// they are. Telling the watcher before publication means that no lookup
// can find a socket on a port the watcher has not heard of.
func (o *Occupancy) Claim(p uint16) error {
	if o.OnPort == nil || o.Users(p) != 0 {
		return nil
	}
	return o.OnPort(p, true)
}

// Release is called, with p's lock held, after a socket on p
// was unlinked and uncounted. If p holds no socket any more, it tells
// OnPort that p went out of use; the error is ignored, since the close
// has happened. A connect, which replaces a socket's entry without
// changing its port, calls neither Claim nor Release.
func (o *Occupancy) Release(p uint16) {
	if o.OnPort != nil && o.Users(p) == 0 {
		_ = o.OnPort(p, false)
	}
}

// Ports yields the ports that hold sockets, in ascending order, from the
// index and without locks. A port is yielded if it held a socket when the
// iteration read its word of the index; a port whose first socket is bound
// or whose last is closed meanwhile may or may not be.
func (o *Occupancy) Ports() iter.Seq[uint16] {
	return func(yield func(uint16) bool) {
		for w := range words {
			for u := o.used.word(w); u != 0; u &= u - 1 {
				if !yield(uint16(w<<6 | bits.TrailingZeros64(u))) {
					return
				}
			}
		}
	}
}
