package serve

import (
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// TestLookWhileLooking: a tick that finds the listener's look lock held
// (by putBatch, or here by the test) does not lose the listener: while it
// is armed, a later tick looks at it. If the watcher dropped it, the batch
// that armed would never be looked at, and a slow call in it would hold
// up every other socket of the port until it returned.
func TestLookWhileLooking(t *testing.T) {
	s, err := New[int](demux.Config{}, func(*Request[int]) {}, Options{IPv4Only: true})
	require.NoError(t, err)
	defer s.Close()
	// As many handed-off calls as allowed: a look notes the call it
	// finds, and hands nothing off.
	l := &listener[int]{s: s, goroutines: maxHandedOff + 1}
	b := s.getBatch(l)
	b.state.Store(inCall)
	l.active.Store(b)

	l.looking.Lock() // a look under way, past its check of armed
	l.arm()
	time.Sleep(5 * watchTick) // the tick fires, and finds the lock held
	l.looking.Unlock()
	require.Eventually(t, func() bool {
		l.looking.Lock()
		defer l.looking.Unlock()
		return b.seen != 0
	}, time.Second, watchTick, "no look after the lock was released")
	l.disarm()
	l.looking.Lock() // waits for a look under way
	//lint:ignore SA2001 the empty section is the wait
	l.looking.Unlock()
	assert.Equal(t, inCall, b.state.Load())
}

// TestWatcherSleepsWhenIdle: the watcher ticks while a reader handles a
// batch and stops once none does, so that an idle server has no
// wake-ups; Close ends its goroutine.
func TestWatcherSleepsWhenIdle(t *testing.T) {
	gs := runtime.NumGoroutine()
	handled := make(chan struct{}, 1)
	s, err := New[int](demux.Config{}, func(*Request[int]) { handled <- struct{}{} }, Options{IPv4Only: true})
	require.NoError(t, err)
	sk, err := s.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.1")}, 0)
	require.NoError(t, err)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.WriteToUDPAddrPort([]byte("x"), sk.LocalAddr())
	require.NoError(t, err)
	select {
	case <-handled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was not called")
	}
	w := s.watching()
	on := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.on
	}
	require.Eventually(t, func() bool { return !on() }, 5*time.Second, watchTick, "the ticker still runs with no batch in progress")
	require.NoError(t, s.Close())
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > gs && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), gs, "goroutines after Close")
}
