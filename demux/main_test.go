package demux_test

import (
	"os"
	"testing"

	"github.com/udpdemux/udpdemux/lockorder"
)

// TestMain runs every test of the package with the lock order checked, so
// an out-of-order acquisition anywhere fails the test run.
func TestMain(m *testing.M) {
	lockorder.SetChecking(true)
	os.Exit(m.Run())
}

// unchecked turns the lock-order checks off for the rest of benchmark b,
// which then measures the writes as programs run them: checked, a write
// of the growing storage also takes and returns a pooled Guard. The
// package's tests stay checked.
func unchecked(b *testing.B) {
	old := lockorder.SetChecking(false)
	b.Cleanup(func() { lockorder.SetChecking(old) })
}
