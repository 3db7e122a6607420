package demux_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// TestBindCloseAllocs: with the default Config, a bind on a busy port
// allocates the handle and the entry, and its close allocates nothing: the
// index keeps the entry's pointer in its line (an index node per key took
// a third allocation).
func TestBindCloseAllocs(t *testing.T) {
	tab, err := demux.New[int32](demux.Config{})
	require.NoError(t, err)
	for i := range 200 {
		_, err := tab.Bind(demux.Options{Addr: addrN(i), Port: 443, ReuseAddr: true}, int32(i))
		require.NoError(t, err)
	}
	o := demux.Options{Addr: netip.MustParseAddr("10.9.9.9"), Port: 443, ReuseAddr: true}
	allocs := testing.AllocsPerRun(200, func() {
		s, err := tab.Bind(o, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := tab.Close(s); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 2.0)
}
