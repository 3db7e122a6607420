package demux_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestLookupBatch: a batch lookup answers every datagram as Lookup does,
// under every configuration, for batch sizes on both sides of the staged
// implementation's 64, with small ports (scanned), large ones (indexed),
// connected sockets, SO_REUSEPORT groups and undeliverable datagrams.
func TestLookupBatch(t *testing.T) {
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, 12))
			tab, err := demux.New[int](cfg)
			require.NoError(t, err)
			addr := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(4)), byte(r.IntN(40))}) }
			id := 0
			for _, port := range []uint16{53, 54, 443} {
				n := 3 // a small port
				if port != 54 {
					n = 300
				}
				for range n {
					o := demux.Options{Addr: addr(), Port: port, ReuseAddr: true}
					switch r.IntN(4) {
					case 0:
						o.Addr = netip.IPv4Unspecified()
					case 1:
						o.ReusePort, o.Owner = true, 1
					}
					id++
					s, err := tab.Bind(o, id)
					require.NoError(t, err)
					if r.IntN(3) == 0 {
						peer := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(r.IntN(3))}), uint16(1000+r.IntN(2)))
						local := netip.Addr{}
						if o.Addr.IsUnspecified() {
							local = addr()
						}
						require.NoError(t, tab.Connect(s, peer, local))
					}
				}
			}
			// Dual-stack wildcards, which IPv4 and IPv6 datagrams reach.
			for _, port := range []uint16{53, 443} {
				id++
				_, err := tab.Bind(demux.Options{Addr: netip.IPv6Unspecified(), Port: port, ReuseAddr: true}, id)
				require.NoError(t, err)
			}
			// The first 100 datagrams are IPv4, which the growing tables
			// look up by the IPv4 path (lookup.Tuple4) in batches of them;
			// among the others every fifth is IPv6, and puts its batch on
			// the general path.
			ds := make([]demux.Datagram, 200)
			for i := range ds {
				ds[i] = demux.Datagram{
					Src: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(r.IntN(3))}), uint16(1000+r.IntN(2))),
					Dst: netip.AddrPortFrom(addr(), []uint16{53, 54, 443, 9}[r.IntN(4)]),
				}
				if i%17 == 0 {
					ds[i].Dst = netip.AddrPortFrom(netip.IPv4Unspecified(), 53) // undeliverable
				}
				if i >= 100 && i%5 == 0 {
					ds[i] = demux.Datagram{
						Src: netip.MustParseAddrPort("[2001:db8::7]:1000"),
						Dst: netip.AddrPortFrom(netip.IPv6Loopback(), []uint16{53, 443}[r.IntN(2)]),
					}
				}
			}
			for _, size := range []int{1, 7, 64, 65, 200} {
				out := make([]*demux.Socket[int], size)
				for start := 0; start+size <= len(ds); start += size {
					require.Equal(t, size, tab.LookupBatch(ds[start:start+size], out))
					for i, s := range out {
						d := ds[start+i]
						want, _ := tab.Lookup(d.Src, d.Dst, d.Ifindex)
						require.Same(t, want, s, "size %d, datagram %v→%v", size, d.Src, d.Dst)
					}
				}
			}
			// A short out slice bounds the batch.
			out := make([]*demux.Socket[int], 3)
			require.Equal(t, 3, tab.LookupBatch(ds, out))
			require.Equal(t, 0, tab.LookupBatch(nil, out))
		})
	}
}

func TestLookupBatchAllocs(t *testing.T) {
	tab, err := demux.New[int](demux.Config{})
	require.NoError(t, err)
	for i := range 100 {
		_, err := tab.Bind(demux.Options{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), Port: 53}, i)
		require.NoError(t, err)
	}
	ds := make([]demux.Datagram, 32)
	for i := range ds {
		ds[i] = demux.Datagram{Src: netip.MustParseAddrPort("192.0.2.1:9"), Dst: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 53)}
	}
	out := make([]*demux.Socket[int], 32)
	require.Zero(t, testing.AllocsPerRun(100, func() { tab.LookupBatch(ds, out) }))
	for i, s := range out {
		require.NotNil(t, s)
		require.Equal(t, i, s.Value())
	}
}
