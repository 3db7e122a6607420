package demux_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestLookup4MatchesLookup: on the growing tables, under every strategy,
// the IPv4 path (Lookup4) gives every IPv4 datagram the socket the general search
// gives it. The differential tests compare both with the model; this one
// compares them with each other, after every op of a random sequence, on
// every datagram the sequence looks up, so that a difference the model's
// answer would hide (the same socket reached another way) still shows.
func TestLookup4MatchesLookup(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 1000
	}
	for ci, c := range diffConfigs() {
		if c.Table.Slots != 0 {
			continue // the IPv4 path is the growing tables'
		}
		t.Run(c.Name, func(t *testing.T) {
			seed := uint64(41 + ci)
			r, err := demuxtest.NewRunner(c, seed)
			require.NoError(t, err)
			ops, err := demuxtest.NewGenerator(r, rand.NewPCG(seed, 0x4444)).Run(n)
			require.NoError(t, err)

			r, err = demuxtest.NewRunner(c, seed)
			require.NoError(t, err)
			var looks []demuxtest.Op
			compared := 0
			for i, o := range ops {
				require.NoError(t, r.Step(i, o), "op %d %v", i, o)
				if o.Kind == demuxtest.Lookup && o.Dst.Addr().Is4() && o.Src.Addr().Is4() {
					looks = append(looks, o)
				}
				if i%10 != 0 {
					continue
				}
				tbl := r.Table()
				for _, l := range looks {
					got, _ := tbl.Lookup(l.Src, l.Dst, l.Ifindex)
					want := demux.LookupGeneral(tbl, l.Src, l.Dst, l.Ifindex)
					require.Equal(t, want, got, "after op %d: lookup %v → %v on %d", i, l.Src, l.Dst, l.Ifindex)
					compared++
				}
			}
			require.Greater(t, compared, n, "too few IPv4 lookups compared")
			// Where ports are indexed from their first few sockets,
			// lookups must have searched the indexes.
			if c.Table.Strategy == demux.TwoPhase || c.Table.Strategy == demux.Hybrid && c.Table.Threshold != 0 {
				require.Positive(t, r.Table().Stats().Lookups.Secondary, "no lookup reached the indexes")
			}
		})
	}
}

// TestConnectedNeighbours: many connected sockets on one address and port
// whose peers differ only in their port, or only in their address, each
// receive their own peer's datagrams, and unknown peers reach the
// listener. With 4 096 peers of each kind, many pairs of 4-tuples share
// a line of the 4-tuple index and the 7-bit tag of their hashes there,
// so that a lookup that checked the tag and not each field of the key
// would take a neighbour's socket (mutations lookup4-fast-*-unchecked).
func TestConnectedNeighbours(t *testing.T) {
	local := netip.MustParseAddrPort("10.0.0.1:4433")
	for _, tc := range []struct {
		name string
		peer func(i int) netip.AddrPort
	}{
		{"ports", func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.MustParseAddr("172.16.0.1"), uint16(10000+i))
		}},
		{"addresses", func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)}), 40000)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4096
			tab, err := demux.New[int](demux.Config{})
			require.NoError(t, err)
			opts := demux.Options{Addr: local.Addr(), Port: local.Port(), ReuseAddr: true}
			_, err = tab.Bind(opts, -1)
			require.NoError(t, err)
			for i := range n {
				s, err := tab.Bind(opts, i)
				require.NoError(t, err)
				require.NoError(t, tab.Connect(s, tc.peer(i), netip.Addr{}))
			}
			require.NoError(t, tab.Verify())
			for i := range n {
				s, v := tab.Lookup(tc.peer(i), local, 1)
				require.NotNil(t, s, "peer %v", tc.peer(i))
				require.Equal(t, i, v, "peer %v", tc.peer(i))
			}
			for i := n; i < 2*n; i++ {
				_, v := tab.Lookup(tc.peer(i), local, 1)
				require.Equal(t, -1, v, "unknown peer %v", tc.peer(i))
			}
		})
	}
}
