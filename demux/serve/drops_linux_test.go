package serve_test

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// TestKernelDrops overflows a kernel socket's small receive buffer while
// the handler is blocked: on loopback the only loss is there, so every
// datagram sent is either received or counted as a kernel drop.
func TestKernelDrops(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		once.Do(func() { close(entered); <-release })
	}, serve.Options{ReadBuffer: 4096, IPv4Only: true})
	require.NoError(t, err)
	defer srv.Stop()
	lo := netip.MustParseAddr("127.0.0.1")
	var port uint16
	for range 10 {
		if s, err := srv.Table().Bind(demux.Options{Addr: lo}, "s"); err == nil {
			port = s.LocalAddr().Port()
			break
		}
	}
	require.NotZero(t, port)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	dst := netip.AddrPortFrom(lo, port)
	send := func() {
		_, err := c.WriteToUDPAddrPort(make([]byte, 100), dst)
		require.NoError(t, err)
	}
	send()
	<-entered
	const burst = 300
	for range burst {
		send()
	}
	close(release)
	// The count arrives with the next datagram that gets through.
	deadline := time.Now().Add(3 * time.Second)
	sent := 1 + burst
	for {
		send()
		sent++
		st := srv.Stats()
		if st.KernelDrops > 0 && st.Received+st.KernelDrops == uint64(sent) {
			t.Logf("sent %d: %+v", sent, st)
			break
		}
		if time.Now().After(deadline) {
			assert.Failf(t, "drops not accounted for", "sent %d: %+v", sent, st)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}
