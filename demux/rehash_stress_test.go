package demux_test

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestRehashUnderLookups: while a socket connects, disconnects and changes
// device over and over, and the group's selector is swapped, lookups of a
// port where three other group members stay bound always find a socket.
// Run with -race, it also checks that these writes publish safely.
func TestRehashUnderLookups(t *testing.T) {
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			tab, err := demux.New[int](cfg)
			require.NoError(t, err)
			ss := bindGroup(t, tab, 0, 4)
			g, _ := ss[0].Group()
			mover := ss[3]
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					assert.NoError(t, mover.Connect(netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), uint16(1+i%100)), netip.MustParseAddr("10.0.0.1")))
					assert.NoError(t, mover.SetDevice(i%3))
					assert.NoError(t, mover.Disconnect())
					if i%2 == 0 {
						g.SetSelector(demux.Rendezvous[int](nil))
					} else {
						g.SetSelector(nil)
					}
				}
			}()
			flows := steerFlows(256)
			for i := range 20000 {
				s, _ := tab.Lookup(flows[i%len(flows)], steerDst, 1+i%2)
				if s == nil {
					t.Errorf("lookup %d found no socket", i)
					break
				}
			}
			stop.Store(true)
			wg.Wait()
			require.NoError(t, tab.Verify())
		})
	}
}
