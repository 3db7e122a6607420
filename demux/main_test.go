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
