package demux_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/internal/difftest"
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
		if !strings.HasPrefix(c.Name, "grow/") {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			seed := uint64(41 + ci)
			r, err := difftest.NewRunner(c, seed)
			require.NoError(t, err)
			ops, err := difftest.NewGenerator(r, rand.NewPCG(seed, 0x4444)).Run(n)
			require.NoError(t, err)

			r, err = difftest.NewRunner(c, seed)
			require.NoError(t, err)
			var looks []difftest.Op
			compared := 0
			for i, o := range ops {
				require.NoError(t, r.Step(i, o), "op %d %v", i, o)
				if o.Kind == difftest.Lookup && o.Dst.Addr().Is4() && o.Src.Addr().Is4() {
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
			// Where ports are indexed from the first socket or the
			// second, lookups must have searched the indexes.
			if c.Table.Strategy == demux.TwoPhase || c.Table.Threshold == 2 {
				require.Positive(t, r.Table().Stats().Lookups.Secondary, "no lookup reached the indexes")
			}
		})
	}
}
