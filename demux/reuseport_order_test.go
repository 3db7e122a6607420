package demux_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
	"github.com/udpdemux/udpdemux/internal/model"
)

// TestReusePortOrder: a group's members keep Linux's order when members
// leave from the middle (the last takes the leaver's place), which decides
// the member each flow reaches. Groups of two cannot tell this order from
// an order-preserving removal, so the group here has six members, and
// members leave by close and by connect.
func TestReusePortOrder(t *testing.T) {
	addr := netip.MustParseAddr("192.0.2.10")
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			tab, err := demux.New[int](cfg)
			require.NoError(t, err)
			m := model.New(model.Config{ReusePortIndex: tab.ReusePortIndex})
			o := demux.Options{Addr: addr, Port: 443, ReusePort: true, Owner: 7}
			var socks []*demux.Socket[int]
			for range 6 {
				id, err := m.Bind(model.Options(o))
				require.NoError(t, err)
				s, err := tab.Bind(o, id)
				require.NoError(t, err)
				socks = append(socks, s)
			}
			leave := []func() error{
				func() error { require.NoError(t, m.Close(1)); return tab.Close(socks[1]) },
				func() error {
					peer := netip.MustParseAddrPort("198.51.100.1:9")
					require.NoError(t, m.Connect(3, peer, netip.Addr{}))
					return tab.Connect(socks[3], peer, netip.Addr{})
				},
				func() error { require.NoError(t, m.Close(0)); return tab.Close(socks[0]) },
			}
			for step, f := range leave {
				require.NoError(t, f())
				var got, want []int
				for i := range 300 {
					src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), uint16(1000+i))
					dst := netip.AddrPortFrom(addr, 443)
					_, v := tab.Lookup(src, dst, 0)
					id, _ := m.Lookup(src, dst, 0)
					got, want = append(got, v), append(want, id)
				}
				require.Empty(t, cmp.Diff(want, got), fmt.Sprintf("after step %d: receivers (-model +table)", step))
				require.NoError(t, tab.Verify())
			}
		})
	}
}
