package grow

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// TestDevicesAreKeys: sockets on one address and port that differ only by
// device are kept apart by device, in the lookups' index and in the bind
// checks' summary, so that neither a lookup nor a bind reads the sockets
// of other devices. Before, each was a class of the address's one key,
// which every lookup for the address and every bind on it scanned whole,
// so that binds and lookups slowed down with every device added. The
// answers must stay what a scan of the port gives.
func TestDevicesAreKeys(t *testing.T) {
	const port, devices = 53, 2000
	for _, tc := range []struct {
		name string
		addr netip.Addr
	}{
		{"IPv4 wildcard", netip.IPv4Unspecified()},
		{"IPv4 address", netip.MustParseAddr("10.0.0.1")},
		{"IPv6 wildcard", netip.IPv6Unspecified()},
		{"IPv6 address", netip.MustParseAddr("2001:db8::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 8))
			g := New([4]uint64{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}, 10, r.Uint64(), &bind.Occupancy{}, bind.NewRand(nil))
			l, err := ipv6.Bind(tc.addr, false, 0, nil)
			require.NoError(t, err)
			entry := func(seq int, dev int32) *lookup.Entry {
				sk := new(lookup.Socket)
				e := &lookup.Entry{Face: lookup.Face{Port: port, Flags: l.Flags | lookup.ReuseAddr, V4: l.V4, V6: l.V6,
					Device: dev, Seq: uint64(seq), Ref: lookup.Ref{Sock: sk}}}
				sk.Cur.Store(e)
				return e
			}
			pr := g.LockPort(port)
			victim := entry(1, 0)
			g.Link(pr, victim)
			byDev := map[int32]*lookup.Entry{}
			for i := range devices {
				e := entry(i+2, int32(i+1))
				inUse, _ := g.InUse(pr, e)
				require.False(t, inUse)
				g.Link(pr, e)
				byDev[e.Device] = e
			}
			g.Unlock(pr)
			requireVerified(t, g)

			key := addrKeyOf(victim)
			hd, ok := g.addrs.Get(g.addrHash(key), key)
			require.True(t, ok)
			assert.Equal(t, 1, heads(hd).len(), "classes under the address's key of no device")
			key.dev = 7
			hd, ok = g.addrs.Get(g.addrHash(key), key)
			require.True(t, ok)
			assert.Equal(t, byDev[7], heads(hd).First, "the key of device 7")
			require.NotNil(t, pr.s.devs.Load())
			assert.Equal(t, devices, pr.s.devs.Load().n, "devices in the port's filter")

			require.NotNil(t, pr.cc, "the port's bind-check summary (bind's TestSummaryKeepsDevicesApart checks its classes)")

			dst := netip.AddrPortFrom(tc.addr, port)
			switch {
			case tc.addr == netip.IPv4Unspecified():
				dst = netip.MustParseAddrPort("10.9.9.9:53")
			case tc.addr == netip.IPv6Unspecified():
				dst = netip.MustParseAddrPort("[2001:db8::9]:53")
			}
			src := netip.MustParseAddrPort("192.0.2.1:1000")
			if dst.Addr().Is6() {
				src = netip.MustParseAddrPort("[2001:db8:1::1]:1000")
			}
			for _, c := range []struct {
				ifindex int
				want    *lookup.Entry
			}{{7, byDev[7]}, {devices, byDev[devices]}, {devices + 1, victim}, {0, victim}} {
				var q lookup.Query
				require.True(t, q.Init(src, dst, c.ifindex))
				got, path := g.Lookup(&q)
				require.Equal(t, lookup.Secondary, path)
				require.NotNil(t, got, "ifindex %d", c.ifindex)
				assert.Same(t, c.want.Ref.Sock, got.Sock, "ifindex %d", c.ifindex)
				if dst.Addr().Is4() {
					var q4 lookup.Query
					got4, _, ok := g.Lookup4(src, dst, c.ifindex, &q4)
					require.True(t, ok)
					require.NotNil(t, got4, "Lookup4, ifindex %d", c.ifindex)
					assert.Same(t, c.want.Ref.Sock, got4.Sock, "Lookup4, ifindex %d", c.ifindex)
				}
			}

			// Without the victim, a bind with no reuse option meets a
			// socket only through its device: on device 7, device 7's
			// socket; on a device no socket has, none; with no device,
			// every one.
			pr = g.LockPort(port)
			g.Unlink(pr, victim)
			for _, c := range []struct {
				dev  int32
				want bool
			}{{7, true}, {devices + 1, false}, {0, true}} {
				n := entry(0, c.dev)
				n.Flags &^= lookup.ReuseAddr
				inUse, indexed := g.InUse(pr, n)
				assert.True(t, indexed)
				assert.Equal(t, c.want, inUse, "device %d", c.dev)
			}
			g.Unlock(pr)

			pr = g.LockPort(port)
			for _, e := range byDev {
				g.Unlock(pr)
				pr = g.LockPort(port)
				g.Unlink(pr, e)
			}
			g.Unlock(pr)
			requireVerified(t, g)
			assert.Zero(t, pr.s.devs.Load().n, "devices in the port's filter")
		})
	}
}

// requireVerified fails the test if g's structures disagree (Verify).
func requireVerified(t *testing.T, g *Engine) {
	t.Helper()
	var errs []string
	g.Verify(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
	require.Empty(t, errs)
}
