package demux

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// roundTrip binds a socket with value v in tables of both storages and
// checks that Lookup, LookupMulticast and Value give v back (Value also
// after a connect and a close), and that V's values go where want says.
func roundTrip[V any](t *testing.T, v V, want valueRep, eq func(a, b V) bool) {
	t.Helper()
	require.Equal(t, want, repOf[V]())
	for _, cfg := range []Config{{}, {Slots: 256}} {
		tab, err := New[V](cfg)
		require.NoError(t, err)
		s, err := tab.Bind(Options{Addr: netip.IPv4Unspecified(), Port: 53}, v)
		require.NoError(t, err)
		src := netip.MustParseAddrPort("192.0.2.1:4000")
		got, gv := tab.Lookup(src, netip.MustParseAddrPort("10.0.0.1:53"), 0)
		require.Same(t, s, got)
		assert.True(t, eq(v, gv), "Lookup's value")
		assert.True(t, eq(v, s.Value()), "Value")
		n := 0
		tab.LookupMulticast(src, netip.MustParseAddrPort("224.0.0.1:53"), 0, func(ms *Socket[V], mv V) bool {
			n++
			assert.Same(t, s, ms)
			assert.True(t, eq(v, mv), "LookupMulticast's value")
			return true
		})
		assert.Equal(t, 1, n)
		// The handle keeps no value of its own: every entry of the socket
		// carries it, the one a connect makes and the last after a close.
		require.NoError(t, s.Connect(src, netip.MustParseAddr("10.0.0.1")))
		assert.True(t, eq(v, s.Value()), "Value after a connect")
		require.NoError(t, s.Close())
		assert.True(t, eq(v, s.Value()), "Value after a close")
	}
}

func same[V comparable](a, b V) bool { return a == b }

// TestValueRep checks each place a value can be kept, with types of every
// shape the rule distinguishes.
func TestValueRep(t *testing.T) {
	type pair struct {
		a int32
		b uint16
	}
	type onePtr struct{ p *int }
	x := 7
	ch := make(chan int)
	m := map[string]int{"a": 1}
	t.Run("int32", func(t *testing.T) { roundTrip(t, int32(-5), inWord, same[int32]) })
	t.Run("int", func(t *testing.T) { roundTrip(t, -1<<62, inWord, same[int]) })
	t.Run("float64", func(t *testing.T) { roundTrip(t, 2.5, inWord, same[float64]) })
	t.Run("struct of two", func(t *testing.T) { roundTrip(t, pair{-3, 9}, inWord, same[pair]) })
	t.Run("array", func(t *testing.T) { roundTrip(t, [2]uint32{1, 1 << 31}, inWord, same[[2]uint32]) })
	t.Run("empty", func(t *testing.T) { roundTrip(t, struct{}{}, inWord, same[struct{}]) })
	t.Run("pointer", func(t *testing.T) { roundTrip(t, &x, inPtr, same[*int]) })
	t.Run("struct of a pointer", func(t *testing.T) { roundTrip(t, onePtr{&x}, inPtr, same[onePtr]) })
	t.Run("chan", func(t *testing.T) { roundTrip(t, ch, inPtr, same[chan int]) })
	t.Run("map", func(t *testing.T) {
		roundTrip(t, m, inPtr, func(a, b map[string]int) bool { return a["a"] == 1 && b["a"] == 1 && len(b) == 1 })
	})
	t.Run("func", func(t *testing.T) {
		roundTrip(t, func() int { return x }, inPtr, func(a, b func() int) bool { return b() == 7 })
	})
	t.Run("string", func(t *testing.T) { roundTrip(t, "dns", boxed, same[string]) })
	t.Run("interface", func(t *testing.T) { roundTrip[any](t, 42, boxed, same[any]) })
	t.Run("big array", func(t *testing.T) { roundTrip(t, [3]int64{1, 2, 3}, boxed, same[[3]int64]) })
	t.Run("slice", func(t *testing.T) {
		roundTrip(t, []byte("ab"), boxed, func(a, b []byte) bool { return string(a) == string(b) })
	})
}
