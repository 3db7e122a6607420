package demux_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// TestBindCloseAllocs: with the default Config, a bind on a busy port
// allocates the handle and the entry, and its close allocates nothing. The
// address index keeps the entry's pointer in a cache line of six; a key
// whose line is full goes to the line's overflow chain, in a node of its
// own (about one bind in ten at this load, depending on the table's seed),
// so the binds here cycle over many addresses, and the test asserts the
// average that AllocsPerRun reports, rounded down. An index node per key,
// as the tables kept before, made it 3.
func TestBindCloseAllocs(t *testing.T) {
	tab, err := demux.New[int32](demux.Config{})
	require.NoError(t, err)
	for i := range 200 {
		_, err := tab.Bind(demux.Options{Addr: addrN(i), Port: 443, ReuseAddr: true}, int32(i))
		require.NoError(t, err)
	}
	next := 0
	allocs := testing.AllocsPerRun(1000, func() {
		next++
		a := netip.AddrFrom4([4]byte{10, 9, byte(next >> 8), byte(next)})
		s, err := tab.Bind(demux.Options{Addr: a, Port: 443, ReuseAddr: true}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := tab.Close(s); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 2.0)
}
