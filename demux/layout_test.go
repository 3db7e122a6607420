package demux

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestHandleLayout checks what handle relies on: the embedded sock.Socket
// is the first field of Socket, whatever V is; and that a handle with a
// value of up to 8 bytes fits the 96-byte size class.
func TestHandleLayout(t *testing.T) {
	require.Zero(t, unsafe.Offsetof(Socket[int]{}.s))
	require.Zero(t, unsafe.Offsetof(Socket[[64]byte]{}.s))
	require.Zero(t, unsafe.Offsetof(Socket[*int]{}.s))
	require.LessOrEqual(t, unsafe.Sizeof(Socket[int32]{}), uintptr(96))
	require.LessOrEqual(t, unsafe.Sizeof(Socket[*int]{}), uintptr(96))
	require.LessOrEqual(t, unsafe.Sizeof(Socket[struct{}]{}), uintptr(96))
}
