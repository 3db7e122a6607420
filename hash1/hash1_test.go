package hash1

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lockorder"
)

func TestNewSizes(t *testing.T) {
	for _, tc := range []struct {
		n, want int
		ok      bool
	}{{0, defaultSlots, true}, {256, 256, true}, {65536, 65536, true}, {512, 512, true}, {255, 0, false}, {128, 0, false}, {3000, 0, false}, {1 << 17, 0, false}, {-1, 0, false}} {
		tab, err := New(tc.n)
		if !tc.ok {
			assert.ErrorIs(t, err, syscall.EINVAL, tc.n)
			assert.Nil(t, tab, tc.n)
			continue
		}
		require.NoError(t, err, tc.n)
		assert.Equal(t, tc.want, tab.Len())
	}
}

func TestIndexIsPortMask(t *testing.T) {
	tab, err := New(256)
	require.NoError(t, err)
	for _, p := range []uint16{0, 1, 255, 256, 257, 65535} {
		assert.Equal(t, int(p&255), tab.Index(p), p)
		assert.Same(t, tab.At(int(p&255)), tab.Slot(p))
	}
}

func TestLockPortTakesTheSlotLock(t *testing.T) {
	old := lockorder.SetChecking(true)
	defer lockorder.SetChecking(old)
	tab, err := New(256)
	require.NoError(t, err)
	var g lockorder.Guard
	tab.LockPort(&g, 300)
	done := make(chan struct{})
	go func() {
		var h lockorder.Guard
		tab.LockPort(&h, 44) // same slot: 300 & 255 == 44
		h.Unlock()
		close(done)
	}()
	// Give the goroutine time to get the lock if it could.
	select {
	case <-done:
		t.Fatal("port 44 locked while port 300's slot was held")
	case <-time.After(20 * time.Millisecond):
	}
	g.Unlock()
	<-done
}
