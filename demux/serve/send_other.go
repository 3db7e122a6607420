//go:build !linux

package serve

// sender sends a Conn's queued datagrams one by one outside Linux.
type sender struct{}

func newSender(c *Conn) *sender { return new(sender) }

// send sends the n queued datagrams from ring index head, and returns
// the first error a datagram met.
func (s *sender) send(q *sendQueue, head, n int) error {
	var first error
	for i := range n {
		e := &q.ents[(head+i)%len(q.ents)]
		if _, _, err := e.k.WriteMsgUDPAddrPort(e.buf, e.oob[:e.oobn], e.to); err != nil && first == nil {
			first = err
		}
	}
	return first
}
