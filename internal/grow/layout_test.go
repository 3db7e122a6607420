package grow

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestPortLayout: a port's record keeps its summary behind a pointer, so
// that the many ports without one cost a 48-byte record each.
func TestPortLayout(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(Port{}), uintptr(48))
}
