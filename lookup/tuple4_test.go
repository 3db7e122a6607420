package lookup

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTuple4Init: Init takes exactly the IPv4 datagrams Query.Init would
// deliver, refusing v4-mapped and IPv6 addresses (Query.Init's to take),
// and Set4 then fills a Query in as Query.Init does.
func TestTuple4Init(t *testing.T) {
	for _, tc := range []struct {
		src, dst string
		ifindex  int
		ok       bool
		dev      int32 // the Tuple4's Ifindex, if ok
	}{
		{"192.0.2.1:1000", "10.0.0.1:53", 3, true, 3},
		{"192.0.2.1:0", "10.0.0.1:53", 0, true, 0},
		{"0.0.0.0:1000", "10.0.0.1:53", 0, true, 0},
		{"192.0.2.1:1000", "127.0.0.6:53", 0, true, 0},
		{"192.0.2.1:1000", "10.0.0.1:53", -1, true, -1},
		{"192.0.2.1:1000", "10.0.0.1:53", -7, true, -1},
		{"192.0.2.1:1000", "10.0.0.1:53", math.MaxInt32, true, math.MaxInt32},
		{"192.0.2.1:1000", "10.0.0.1:53", math.MaxInt32 + 1, true, -1},
		{"192.0.2.1:1000", "10.0.0.1:53", math.MaxUint32 + 5, true, -1},
		{"192.0.2.1:1000", "0.0.0.0:53", 0, false, 0},
		{"192.0.2.1:1000", "10.0.0.1:0", 0, false, 0},
		{"[::ffff:192.0.2.1]:1000", "10.0.0.1:53", 0, false, 0},
		{"192.0.2.1:1000", "[::ffff:10.0.0.1]:53", 0, false, 0},
		{"[2001:db8::1]:1000", "[2001:db8::2]:53", 0, false, 0},
		{"192.0.2.1:1000", "[2001:db8::2]:53", 0, false, 0},
	} {
		src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
		var t4 Tuple4
		require.Equal(t, tc.ok, t4.Init(src, dst, tc.ifindex), "%s → %s", tc.src, tc.dst)
		if !tc.ok {
			continue
		}
		// An index that does not fit an int32 is no device's, and is
		// not truncated into another's.
		assert.Equal(t, tc.dev, t4.Ifindex, "%s → %s on %d", tc.src, tc.dst, tc.ifindex)
		var want, got Query
		require.True(t, want.Init(src, dst, tc.ifindex))
		got.Set4(t4.Src, t4.Dst, t4.SrcPort, t4.DstPort, t4.Ifindex)
		assert.Empty(t, cmp.Diff(want, got, cmp.AllowUnexported(Query{})), "%s → %s", tc.src, tc.dst)
	}
	var t4 Tuple4
	assert.False(t, t4.Init(netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.1:53"), 0), "no source")
}

// TestScore4MatchesScore: for every kind of candidate an IPv4 datagram
// can meet, the Tuple4 path's ways to score give what score gives the
// same datagram as a Query: Score4, which reads the tuple through the same
// rules (local4, peerAndDevice), and ExactTo, the three comparisons a
// 4-tuple match leaves, which must come to score's exact tier. Each field
// takes the datagram's value, a wildcard or another value, so every rule
// both holds and fails.
func TestScore4MatchesScore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t4 := Tuple4{Src: 0xc0000201, Dst: 0x0a000001, SrcPort: 1000, DstPort: 53, Ifindex: 3}
	var q Query
	q.Set4(t4.Src, t4.Dst, t4.SrcPort, t4.DstPort, t4.Ifindex)
	pick := func(xs ...uint32) uint32 { return xs[rng.IntN(len(xs))] }
	flagBits := []uint8{HasV4, HasV6, Is6, Connected, Hash4}
	seen := map[int]int{}
	exacts := map[bool]int{} // ExactTo's answers where the 4-tuple matched
	for range 20000 {
		var f uint8
		for _, b := range flagBits {
			if rng.IntN(2) == 0 {
				f |= b
			}
		}
		e := Face{
			Port:       uint16(pick(53, 54)),
			Flags:      f,
			V4:         pick(t4.Dst, 0, 0x0a000002, 127<<24|6),
			V6:         Map4(pick(t4.Dst, 0, 0x0a000002)),
			RemotePort: uint16(pick(1000, 1001)),
			Remote:     Map4(pick(t4.Src, 0xc0000202)),
			Device:     int32(pick(0, 3, 4)),
		}
		want := score(&e, &q)
		require.Equal(t, want, Score4(&e, &t4), "%+v", e)
		seen[want]++
		if e.Port == t4.DstPort && e.Remote == Map4(t4.Src) && e.RemotePort == t4.SrcPort {
			exact := ExactScore(want)
			require.Equal(t, exact, ExactTo(&e, t4.Dst, t4.Ifindex), "%+v", e)
			exacts[exact]++
		}
	}
	assert.Positive(t, exacts[true], "ExactTo never drawn true")
	assert.Positive(t, exacts[false], "ExactTo never drawn false")
	// Every tier was met, and misses: the draw covered the rules.
	for _, s := range []int{-1, 1, 2, 2 + 8, 2 + 4, exactTier + 1, exactTier + 2, exactTier + 2 + 8 + 4, hash4Score} {
		assert.Positive(t, seen[s], "score %d never drawn", s)
	}
}

// TestV4: V4 gives an IPv4 address's number, and 0, without a panic, for
// every address that is not IPv4.
func TestV4(t *testing.T) {
	for _, tc := range []struct {
		addr netip.Addr
		want uint32
	}{
		{netip.MustParseAddr("10.0.0.1"), 0x0a000001},
		{netip.MustParseAddr("255.254.253.252"), 0xfffefdfc},
		{netip.MustParseAddr("0.0.0.0"), 0},
		{netip.MustParseAddr("::ffff:10.0.0.1"), 0},
		{netip.MustParseAddr("2001:db8::1"), 0},
		{netip.Addr{}, 0},
	} {
		assert.Equal(t, tc.want, V4(tc.addr), "%v", tc.addr)
	}
}
