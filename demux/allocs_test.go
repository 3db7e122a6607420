package demux_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// TestBindCloseAllocs: with the default Config, a bind on a busy port
// allocates the handle, the entry and its index node, and its close
// allocates nothing.
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
	require.LessOrEqual(t, allocs, 3.0)
}
