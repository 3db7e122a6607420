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

// TestEntriesApart: the count that binds and closes write starts at least
// a cache line after the end of the fields that lookups read, whatever
// the engine's alignment.
func TestEntriesApart(t *testing.T) {
	var g Engine
	readEnd := unsafe.Offsetof(g.occ) + unsafe.Sizeof(g.occ)
	require.GreaterOrEqual(t, unsafe.Offsetof(g.entries), readEnd+64)
}
