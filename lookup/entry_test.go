package lookup

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLayout pins the entry's size and the split of its two cache lines:
// what a primary-chain lookup reads must stay in the first 64 bytes.
func TestLayout(t *testing.T) {
	var e Entry
	assert.Equal(t, uintptr(128), unsafe.Sizeof(e))
	for name, end := range map[string]uintptr{
		"N1":     unsafe.Offsetof(e.N1) + unsafe.Sizeof(e.N1),
		"Port":   unsafe.Offsetof(e.Port) + unsafe.Sizeof(e.Port),
		"V4":     unsafe.Offsetof(e.V4) + unsafe.Sizeof(e.V4),
		"Device": unsafe.Offsetof(e.Device) + unsafe.Sizeof(e.Device),
		"V6":     unsafe.Offsetof(e.V6) + unsafe.Sizeof(e.V6),
		"Sock":   unsafe.Offsetof(e.Ref) + unsafe.Sizeof(e.Ref.Sock),
		"Group":  unsafe.Offsetof(e.Group) + unsafe.Sizeof(e.Group),
	} {
		assert.LessOrEqual(t, end, uintptr(64), name)
	}
}

func TestOf(t *testing.T) {
	e := new(Entry)
	require.Same(t, e, OfPrimary(&e.N1))
	require.Same(t, e, OfSecondary(&e.N2))
}

func TestAddr16(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "127.0.0.1", "255.255.255.255", "::", "::1", "::ffff:10.1.2.3", "2001:db8::42", "fe80::1"} {
		a := netip.MustParseAddr(s)
		x := Addr16Of(a)
		assert.Equal(t, a, x.Addr(a.Is4()), s)
		assert.Equal(t, a.Is4() || a.Is4In6(), x.IsMapped(), s)
		if a.Is4() {
			assert.Equal(t, Map4(x.V4()), x, s)
		}
	}
	assert.Equal(t, Wild4, Addr16Of(netip.IPv4Unspecified()))
	assert.Equal(t, Wild6, Addr16Of(netip.IPv6Unspecified()))
}

func TestChain(t *testing.T) {
	var c Chain
	es := make([]*Entry, 4)
	for i := range es {
		es[i] = &Entry{Face: Face{Port: uint16(i)}}
		c.PushFront(&es[i].N1)
	}
	order := func() []uint16 {
		var got []uint16
		for n := c.First(); n != nil; n = n.Next.Load() {
			got = append(got, OfPrimary(n).Port)
		}
		return got
	}
	assert.Equal(t, []uint16{3, 2, 1, 0}, order())
	assert.Equal(t, 4, c.Len())
	c.Remove(&es[2].N1)
	assert.Equal(t, []uint16{3, 1, 0}, order())
	// A reader standing on the removed node still reaches the rest.
	assert.Same(t, &es[1].N1, es[2].N1.Next.Load())
	r := &Entry{Face: Face{Port: 9}}
	c.Replace(&es[3].N1, &r.N1)
	assert.Equal(t, []uint16{9, 1, 0}, order())
	c.Remove(&es[0].N1)
	c.Remove(&r.N1)
	c.Remove(&es[1].N1)
	assert.Empty(t, order())
	assert.Zero(t, c.Len())
}

// TestChainSize: a chain, and so a slot, is 16 bytes, so that the slot
// arrays that lookups read stay dense.
func TestChainSize(t *testing.T) {
	assert.Equal(t, uintptr(16), unsafe.Sizeof(Chain{}))
}

// TestHash checks Addr16.Hash, XXH64 specialised to 16 bytes, against the
// xxhash library over the address's bytes in network order.
func TestHash(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		seed, a := r.Uint64(), Addr16{Hi: r.Uint64(), Lo: r.Uint64()}
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], a.Hi)
		binary.BigEndian.PutUint64(b[8:], a.Lo)
		d := xxhash.NewWithSeed(seed)
		_, _ = d.Write(b[:])
		require.Equal(t, d.Sum64(), a.Hash(seed), "seed %#x addr %x", seed, b)
	}
}
