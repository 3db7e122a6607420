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

	"github.com/udpdemux/udpdemux/lookup"
)

// TestXXH64 checks the specialised hash against the xxhash library.
func TestXXH64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		seed, a := r.Uint64(), lookup.Addr16{Hi: r.Uint64(), Lo: r.Uint64()}
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
	assert.Equal(t, tab.AddrHash(lookup.Wild4), tab.WildHash())
	a := lookup.Addr16Of(netip.MustParseAddr("192.0.2.1"))
	h := tab.AddrHash(a)
	assert.Equal(t, tab.Index(h, 53), tab.IndexOf(&lookup.Entry{Face: lookup.Face{Port: 53, V6: a, V4: a.V4(), Flags: lookup.HasV4}}))
	// Seeds change the hash.
	other, _ := New(1024, 43)
	assert.NotEqual(t, h, other.AddrHash(a))
}

// TestPortsDoNotAlias: ports P and P+slots must not share slots (they do
// when the port is xored into the hash and masked, as in Linux, which lets
// a tenant on P+slots slow every lookup on P). For random address hashes,
// the slots of (h, P) and (h, P+k·slots) coincide about once in slots.
func TestPortsDoNotAlias(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{256, 4096, 32768} {
		tab, err := New(n, r.Uint64())
		require.NoError(t, err)
		same := 0
		const tries = 20000
		for range tries {
			h := r.Uint32()
			p := uint16(r.Uint32())
			k := uint16(1 + r.IntN(65536/n-1))
			if tab.Index(h, p) == tab.Index(h, p+k*uint16(n)) {
				same++
			}
		}
		// Expected tries/n; allow a wide margin, far below tries.
		assert.Less(t, same, 4*tries/n+10, "slots %d", n)
		// The wildcard slot too: one hash, many ports.
		w := tab.WildHash()
		hits := map[int]int{}
		for p := 0; p < 65536; p += n {
			hits[tab.Index(w, uint16(53+p))]++
		}
		assert.Less(t, maxCount(hits), 8, "slots %d", n)
	}
}

func maxCount(m map[int]int) int {
	best := 0
	for _, v := range m {
		best = max(best, v)
	}
	return best
}
