package demux

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestHandleLayout checks what handle relies on: the embedded sock.Socket
// is the first field of Socket, whatever V is.
func TestHandleLayout(t *testing.T) {
	require.Zero(t, unsafe.Offsetof(Socket[int]{}.s))
	require.Zero(t, unsafe.Offsetof(Socket[[64]byte]{}.s))
	require.Zero(t, unsafe.Offsetof(Socket[*int]{}.s))
}
