package demux_test

import (
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

func addrN(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// bytesPerOp returns the bytes allocated per call of f, over n calls.
func bytesPerOp(n int, f func(i int)) float64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	for i := range n {
		f(i)
	}
	runtime.ReadMemStats(&b)
	return float64(b.TotalAlloc-a.TotalAlloc) / float64(n)
}

// TestLongChainWritesStayCheap: binding, connecting and closing on a port
// that already holds many sockets (distinct addresses) allocates no more
// than on an empty port: no write copies a chain.
func TestLongChainWritesStayCheap(t *testing.T) {
	big := 200000
	if testing.Short() || raceEnabled {
		big = 20000
	}
	for _, c := range demuxtest.Strategies() {
		cfg, s, name := c.Table, c.Table.Strategy, c.Name
		if cfg.Slots != 0 {
			// 4096 fixed slots keep the secondary chains of 200 000
			// sockets on one port some 50 long; 256 make them 800,
			// which every bind check scans, and the test ten times
			// slower.
			cfg.Slots = 4096
			name = strings.Replace(name, "fixed256", "fixed4096", 1)
		}
		t.Run(name, func(t *testing.T) {
			tab, err := demux.New[int](cfg)
			require.NoError(t, err)
			cost := func(base int) float64 {
				return bytesPerOp(200, func(i int) {
					sk, err := tab.Bind(demux.Options{Addr: addrN(base + i), Port: 443}, i)
					if err != nil {
						t.Fatal(err)
					}
					if err := tab.Connect(sk, netip.MustParseAddrPort("192.0.2.1:9"), netip.Addr{}); err != nil {
						t.Fatal(err)
					}
					if err := tab.Close(sk); err != nil {
						t.Fatal(err)
					}
				})
			}
			short := cost(0)
			for i := range big {
				if s == demux.OnePhase && i == 2000 {
					break // one-phase bind checks scan the chain: keep it short
				}
				_, err := tab.Bind(demux.Options{Addr: addrN(1000 + i), Port: 443}, i)
				require.NoError(t, err)
			}
			long := cost(big + 5000)
			t.Logf("%v: %.0f B per bind+connect+close on an empty port, %.0f B with %d sockets on it", s, short, long, tab.Len())
			assert.Less(t, long, short+256, "a write on a long chain allocates more than on a short one")
			require.NoError(t, tab.Verify())
		})
	}
}
