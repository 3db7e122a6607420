package demux

import (
	"fmt"
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
	// demuxtest.Storages' two configurations, written out: demuxtest
	// imports demux, so that this test, inside the package, cannot use it.
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

// groupValues binds an SO_REUSEPORT group whose members' values val gives,
// in tables of both storages, then closes some members (the last member
// taking each leaver's place), and checks after each bind and at the end
// that every lookup returns a member with that member's own value. A
// group keeps a copy of each member's value beside its socket, in
// whichever word the values need (see lookup.Group); a group
// whose first values are zero and whose later ones need the other word
// must change its copies, not drop them.
func groupValues[V any](t *testing.T, val func(k int) V, eq func(a, b V) bool) {
	t.Helper()
	const members = 40
	dst := netip.MustParseAddrPort("10.0.0.1:443")
	// check looks up flows datagrams and reports which members answered.
	check := func(tab *Table[V], want map[*Socket[V]]V, flows int) map[*Socket[V]]bool {
		seen := map[*Socket[V]]bool{}
		for i := range flows {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}), uint16(1024+i))
			s, v := tab.Lookup(src, dst, 0)
			require.NotNil(t, s)
			w, ok := want[s]
			require.True(t, ok, "a closed member answered")
			require.True(t, eq(w, v), "%d members: member's value: got %v, want %v", len(want), v, w)
			seen[s] = true
		}
		return seen
	}
	for _, cfg := range []Config{{}, {Slots: 256}} { // demuxtest.Storages, as in roundTrip
		tab, err := New[V](cfg)
		require.NoError(t, err)
		want := map[*Socket[V]]V{}
		var ss []*Socket[V]
		for k := range members {
			s, err := tab.Bind(Options{Addr: netip.IPv4Unspecified(), Port: 443, ReusePort: true}, val(k))
			require.NoError(t, err)
			want[s] = val(k)
			ss = append(ss, s)
			check(tab, want, 256)
		}
		for _, k := range []int{0, 7, 8, 20} {
			require.NoError(t, ss[k].Close())
			delete(want, ss[k])
		}
		require.NoError(t, tab.Verify())
		// Every member is picked at least once by 4096 flows, with a
		// probability of missing one below 10^-40 for a uniform pick.
		assert.Len(t, check(tab, want, 4096), len(want))
	}
}

// TestGroupValues checks the values a group's lookups return, for values
// in Word, in Ptr, and boxed, each with zero values first.
func TestGroupValues(t *testing.T) {
	vals := make([]int, 64)
	for k := range vals {
		vals[k] = k
	}
	t.Run("word", func(t *testing.T) {
		groupValues(t, func(k int) int32 { return int32(max(k-2, 0)) }, same[int32])
	})
	t.Run("pointer after nils", func(t *testing.T) {
		groupValues(t, func(k int) *int {
			if k < 3 {
				return nil
			}
			return &vals[k]
		}, same[*int])
	})
	t.Run("boxed after empty", func(t *testing.T) {
		groupValues(t, func(k int) string {
			if k < 3 {
				return ""
			}
			return fmt.Sprint(k)
		}, same[string])
	})
}
