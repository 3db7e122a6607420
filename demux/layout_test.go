package demux

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestHandleLayout checks what handle relies on: the embedded lookup.Socket
// is the first field of Socket, whatever V is; and that a handle fits the
// 64-byte size class, whatever V is, since the value is kept in the
// socket's entries only, and its zone in its home.
func TestHandleLayout(t *testing.T) {
	require.Zero(t, unsafe.Offsetof(Socket[int]{}.s))
	require.Zero(t, unsafe.Offsetof(Socket[[64]byte]{}.s))
	require.Zero(t, unsafe.Offsetof(Socket[*int]{}.s))
	for _, size := range []uintptr{
		unsafe.Sizeof(Socket[int32]{}),
		unsafe.Sizeof(Socket[*int]{}),
		unsafe.Sizeof(Socket[struct{}]{}),
		unsafe.Sizeof(Socket[[64]byte]{}),
	} {
		require.LessOrEqual(t, size, uintptr(64))
	}
}

// TestWrittenApart: the fields that binds and closes write start at least
// a cache line after the end of those that lookups read, whatever the
// table's alignment, so that a write never takes a line a lookup loads.
func TestWrittenApart(t *testing.T) {
	var x Table[int]
	readEnd := unsafe.Offsetof(x.home) + unsafe.Sizeof(x.home)
	for _, written := range []uintptr{unsafe.Offsetof(x.occ), unsafe.Offsetof(x.seq), unsafe.Offsetof(x.stats)} {
		require.GreaterOrEqual(t, written, readEnd+64)
	}
}
