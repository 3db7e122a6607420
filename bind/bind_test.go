package bind

import (
	"math/rand/v2"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

func entry(t *testing.T, addr string, flags uint8, dev int32, owner uint32) *lookup.Entry {
	t.Helper()
	l, err := ipv6.Bind(netip.MustParseAddr(addr), false, 0, nil)
	require.NoError(t, err)
	return &lookup.Entry{Face: lookup.Face{Flags: l.Flags | flags, V4: l.V4, V6: l.V6, Device: dev, Port: 53, Ref: lookup.Ref{Sock: new(lookup.Socket)}}, Owner: owner}
}

// TestConflicts covers the option rules; package ipv6 tests the address
// overlap.
func TestConflicts(t *testing.T) {
	const ra, rp = lookup.ReuseAddr, lookup.ReusePort
	for _, tc := range []struct {
		name           string
		nFlags, eFlags uint8
		nDev, eDev     int32
		nOwner, eOwner uint32
		conflict       bool
	}{
		{"plain", 0, 0, 0, 0, 0, 0, true},
		{"both reuseaddr", ra, ra, 0, 0, 0, 0, false},
		{"one reuseaddr", ra, 0, 0, 0, 0, 0, true},
		{"devices differ", 0, 0, 1, 2, 0, 0, false},
		{"one device", 0, 0, 1, 0, 0, 0, true},
		{"same device", 0, 0, 2, 2, 0, 0, true},
		{"reuseport same owner", rp, rp, 0, 0, 7, 7, false},
		{"reuseport other owner", rp, rp, 0, 0, 7, 8, true},
		{"one reuseport", rp, 0, 0, 0, 0, 0, true},
	} {
		n := entry(t, "127.0.0.1", tc.nFlags, tc.nDev, tc.nOwner)
		e := entry(t, "127.0.0.1", tc.eFlags, tc.eDev, tc.eOwner)
		assert.Equal(t, tc.conflict, Conflicts(n, e), tc.name)
		// Disjoint addresses never conflict, whatever the options.
		assert.False(t, Conflicts(entry(t, "127.0.0.2", tc.nFlags, tc.nDev, tc.nOwner), e), tc.name)
	}
}

func TestNewRange(t *testing.T) {
	r, err := NewRange(0, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, uint16(defaultLow), r.Low)
	assert.Equal(t, uint16(defaultHigh), r.High)
	for _, bad := range [][2]uint16{{0, 10}, {10, 9}} {
		_, err := NewRange(bad[0], bad[1], nil)
		assert.ErrorIs(t, err, syscall.EINVAL, bad)
	}
	r, err = NewRange(100, 110, []uint16{105, 200})
	require.NoError(t, err)
	for p := 90; p < 120; p++ {
		assert.Equal(t, p >= 100 && p <= 110 && p != 105, r.allowed(uint16(p)), p)
	}
	assert.True(t, r.reservedPort(200))
}

func TestSelectBit(t *testing.T) {
	w := uint64(0b1011_0100)
	for k, want := range []uint16{2, 4, 5, 7} {
		assert.Equal(t, want, selectBit(w, k))
	}
}

func TestRandIntNInRange(t *testing.T) {
	r := NewRand(rand.NewPCG(1, 2))
	seen := map[int]int{}
	for range 7000 {
		v := r.IntN(nil, 7)
		require.True(t, v >= 0 && v < 7)
		seen[v]++
	}
	for v := range 7 {
		assert.InDelta(t, 1000, seen[v], 150, v)
	}
}

// TestOccupancyBlocks: which sockets block which new sockets outright.
func TestOccupancyBlocks(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		flags  uint8
		b4, b6 bool
	}{
		{"0.0.0.0", 0, true, false},
		{"::ffff:0.0.0.0", 0, true, false},
		{"::", 0, true, true},
		{"::", lookup.V6Only, false, true},
		{"0.0.0.0", lookup.ReuseAddr, false, false},
		{"::", lookup.ReusePort, false, false},
		{"127.0.0.1", 0, false, false},
	} {
		e := entry(t, tc.addr, tc.flags, 0, 0)
		if tc.flags&lookup.V6Only != 0 {
			e.Flags &^= lookup.HasV4
		}
		b4, b6 := blocks(e)
		assert.Equal(t, [2]bool{tc.b4, tc.b6}, [2]bool{b4, b6}, "%s %b", tc.addr, tc.flags)
	}
	r, _ := NewRange(53, 53, nil)
	o := Occupancy{Range: r}
	e := entry(t, "0.0.0.0", 0, 0, 0)
	o.Add(e)
	free, unblocked := o.census(entry(t, "127.0.0.1", 0, 0, 0))
	assert.Zero(t, free)
	assert.False(t, unblocked, "0.0.0.0 blocks every IPv4 socket")
	_, unblocked = o.census(entry(t, "::1", lookup.V6Only, 0, 0))
	assert.True(t, unblocked, "but not an IPv6-only one")
	o.Remove(e)
	free, _ = o.census(e)
	assert.Equal(t, 1, free)
	assert.Zero(t, o.Total())
}

// panicOnce is a random source whose first draw panics.
type panicOnce struct{ done bool }

func (p *panicOnce) Uint64() uint64 {
	if !p.done {
		p.done = true
		panic("broken source")
	}
	return 7
}

// TestRandPanicUnlocks: a source that panics must leave Rand usable, its
// lock free, for the draws after it.
func TestRandPanicUnlocks(t *testing.T) {
	r := NewRand(&panicOnce{})
	require.Panics(t, func() { r.Uint64() })
	done := make(chan uint64, 1)
	go func() { done <- r.Uint64() }()
	select {
	case v := <-done:
		assert.Equal(t, uint64(7), v)
	case <-time.After(5 * time.Second):
		t.Fatal("the draw after a panicking one did not return: Rand's lock is still held")
	}
}
