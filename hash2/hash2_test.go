package hash2

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/internal/sock"
)

// TestXXH64 checks the specialised hash against the xxhash library.
func TestXXH64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		seed, a := r.Uint64(), sock.Addr16{Hi: r.Uint64(), Lo: r.Uint64()}
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], a.Hi)
		binary.BigEndian.PutUint64(b[8:], a.Lo)
		d := xxhash.NewWithSeed(seed)
		d.Write(b[:])
		want := d.Sum64()
		tab, err := New(256, seed)
		require.NoError(t, err)
		require.Equal(t, uint32(want)^uint32(want>>32), tab.AddrHash(a), "seed %#x addr %x", seed, b)
	}
}

func TestNewSizes(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{256, true}, {65536, true}, {1024, true}, {0, false}, {128, false}, {300, false}, {131072, false}, {-256, false}} {
		tab, err := New(tc.n, 1)
		if tc.ok {
			require.NoError(t, err, tc.n)
			assert.Equal(t, tc.n, tab.Len())
		} else {
			assert.ErrorIs(t, err, syscall.EINVAL, tc.n)
			assert.Nil(t, tab)
		}
	}
}

// TestIndex checks the key properties: the port is mixed in after the
// address hash, and the wildcard's hash is precomputed.
func TestIndex(t *testing.T) {
	tab, err := New(1024, 42)
	require.NoError(t, err)
	assert.Equal(t, tab.AddrHash(sock.Wild4), tab.WildHash())
	a := sock.From16(netip.MustParseAddr("192.0.2.1"))
	h := tab.AddrHash(a)
	assert.Equal(t, int((h^53)&1023), tab.Index(h, 53))
	// Seeds change the hash.
	other, _ := New(1024, 43)
	assert.NotEqual(t, h, other.AddrHash(a))
}
