package demux

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestHandleLayout checks what handle and ref rely on: the embedded
// sock.Socket is the first field of Socket, and sock.Ref that of ref,
// whatever V is.
func TestHandleLayout(t *testing.T) {
	require.Zero(t, unsafe.Offsetof(Socket[int]{}.s))
	require.Zero(t, unsafe.Offsetof(Socket[[64]byte]{}.s))
	require.Zero(t, unsafe.Offsetof(Socket[*int]{}.s))
	require.Zero(t, unsafe.Offsetof(ref[int]{}.Ref))
	require.Zero(t, unsafe.Offsetof(ref[[64]byte]{}.Ref))
}
