package serve

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConnQueueGrowsInOrder: a Conn's queue of received datagrams, a
// ring, keeps their order when it grows while it wraps around its end.
func TestConnQueueGrowsInOrder(t *testing.T) {
	c := newConn(fakeSocket{netip.MustParseAddrPort("127.0.0.2:53")}, false, false, false, nil, nil, new(sync.Pool), new(atomic.Uint64))
	c.limit = 1 << 30
	seq, want := 0, 0
	push := func(n int) {
		for range n {
			p := &packet{buf: make([]byte, 1), n: 1}
			p.buf[0] = byte(seq)
			seq++
			require.True(t, c.push(p))
		}
	}
	pop := func(n int) {
		for range n {
			p, err := c.next()
			require.NoError(t, err)
			assert.Equal(t, byte(want), p.buf[0], "datagram %d", want)
			want++
		}
	}
	start := len(c.q)
	push(start / 2)
	pop(start / 2) // the ring's head is in its middle now
	push(3 * start)
	pop(3 * start)
	assert.Greater(t, len(c.q), start, "the queue grew")
}
