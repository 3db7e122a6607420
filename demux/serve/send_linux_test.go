package serve_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConnFlushOnClose: datagrams written just before Close are sent,
// though the writes returned before they were, and the server closes
// its kernel sockets right after.
func TestConnFlushOnClose(t *testing.T) {
	cs := newConnServer(t)
	c := cs.listen(t, "127.0.0.2", 0)
	cl := client(t, "127.0.0.9")
	require.NoError(t, cl.SetReadBuffer(4<<20))
	to := cl.LocalAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort()
	const n = 300 // more than the queue's slots: some writes wait
	for i := range n {
		_, err := c.WriteToUDPAddrPort(fmt.Appendf(nil, "%d", i), to)
		require.NoError(t, err)
	}
	require.NoError(t, c.Close())
	require.NoError(t, cs.srv.Close())
	_, err := c.WriteToUDPAddrPort([]byte("late"), to)
	assert.Error(t, err, "a write after Close")
	buf := make([]byte, 64)
	for i := range n {
		require.NoError(t, cl.SetReadDeadline(time.Now().Add(2*time.Second)))
		k, _, err := cl.ReadFromUDPAddrPort(buf)
		require.NoError(t, err, "datagram %d", i)
		require.Equal(t, fmt.Sprint(i), string(buf[:k]))
	}
}

// TestConnQueuedAllocs: writes that go through the send queue (runs of
// one size to one peer) and the writer's segmented sends allocate
// nothing per datagram.
func TestConnQueuedAllocs(t *testing.T) {
	cs := newConnServer(t)
	c := cs.listen(t, "127.0.0.2", 0)
	cl := client(t, "127.0.0.9")
	require.NoError(t, cl.SetReadBuffer(1<<20))
	to := cl.LocalAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort()
	payload, buf := make([]byte, 1200), make([]byte, 2048)
	round := func() {
		for range 16 {
			if _, err := c.WriteToUDPAddrPort(payload, to); err != nil {
				panic(err)
			}
		}
		for range 16 {
			if _, _, err := cl.ReadFromUDPAddrPort(buf); err != nil {
				panic(err)
			}
		}
	}
	for range 50 {
		round()
	}
	assert.Zero(t, testing.AllocsPerRun(200, round), "allocations per 16 datagrams")
}
