package serve

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// TestLookWhileLooking: a tick that fires while an earlier look (or
// putBatch) still holds the listener's look lock is not lost. The earlier
// look may have found the listener disarmed, just before the arm whose
// tick this is, and so not look again; if the tick gave up, the batch
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
	l.looking.Unlock()
	assert.Equal(t, inCall, b.state.Load())
}
