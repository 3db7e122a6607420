package lookup

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestFirst4: the first 4-tuple is read back exactly whatever holds it; an
// entry holds it only while it has that 4-tuple and order, and an entry
// the socket has left is never what holds it.
func TestFirst4(t *testing.T) {
	peer := func(lo uint64) Addr16 { return Addr16{Hi: 0x20010db8 << 32, Lo: lo} }
	entry := func(remote Addr16, rport uint16, seq uint64) *Entry {
		return &Entry{Face: Face{Port: 53, V6: Map4(10<<24 | 1), Remote: remote, RemotePort: rport, Seq: seq}}
	}
	first := entry(peer(1), 4000, 7)
	want := Tuple{local: Map4(10<<24 | 1), remote: peer(1), localPort: 53, remotePort: 4000, Seq: 7}
	for _, tc := range []struct {
		name string
		next *Entry
		held bool // next holds the tuple after Pass
	}{
		{"same 4-tuple and order", entry(peer(1), 4000, 7), true},
		{"another peer", entry(peer(2), 4000, 9), false},
		{"another peer port", entry(peer(1), 4001, 9), false},
		{"same 4-tuple, another order", entry(peer(1), 4000, 9), false},
		{"disconnected", entry(Addr16{}, 0, 9), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Socket
			_, ok := s.First4()
			require.False(t, ok)
			s.holdFirst4(first)
			got, ok := s.First4()
			require.True(t, ok)
			require.Equal(t, want, got)

			s.Pass(first, tc.next)
			got, ok = s.First4()
			require.True(t, ok)
			require.Equal(t, want, got)
			require.NotEqual(t, unsafe.Pointer(first), s.first4, "the entry left still holds the tuple")
			require.Equal(t, tc.held, s.first4 == unsafe.Pointer(tc.next))
			require.Equal(t, !tc.held, s.first4Own)

			// Passing from an entry that does not hold it changes nothing.
			before := s.first4
			s.Pass(entry(peer(3), 1, 1), entry(peer(4), 1, 1))
			require.Equal(t, before, s.first4)

			s.ForgetFirst4()
			_, ok = s.First4()
			require.False(t, ok)
		})
	}
}

// TestSocketSize: the first 4-tuple's two words fit what was one pointer
// and padding, so the socket stays 40 bytes (the public handle's size
// class depends on it).
func TestSocketSize(t *testing.T) {
	require.Equal(t, uintptr(40), unsafe.Sizeof(Socket{}))
}
