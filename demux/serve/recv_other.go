//go:build !linux

package serve

import (
	"net"
	"net/netip"
)

// receiver has nothing outside Linux, where reads go through x/net,
// which reads one datagram per system call there anyway.
type receiver struct{}

func newReceiver(int) *receiver { return &receiver{} }

// readBatch reads the next batch into the reader's batch, which it takes
// from the pool if it has none, and returns it with the number of
// datagrams read. Outside Linux the reader keeps its batch while it
// waits: ReadBatch blocks with the buffers it was given.
func (l *listener[V]) readBatch() (*batch[V], int, error) {
	b := l.take()
	ms := b.msgs[:min(l.window, len(b.msgs))]
	n, err := l.pc.ReadBatch(ms, 0)
	if err != nil {
		return b, 0, err
	}
	for i := range n {
		b.pk[i].src = netip.AddrPort{}
		if ua, ok := ms[i].Addr.(*net.UDPAddr); ok {
			b.pk[i].src = ua.AddrPort()
		}
	}
	return b, n, nil
}

// drainsQueue is false: outside Linux a socket closes at its batch's end
// without reading its queue dry (Server.end).
const drainsQueue = false
