package demux

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestHandleLayout checks what handle relies on: the embedded sock.Socket
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
