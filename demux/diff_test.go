package demux_test

import (
	"errors"
	"flag"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// The differential tests run sequences of operations on the reference
// model and on a demux.Table under every configuration of
// demuxtest.Configs, and compare every answer (see package
// demux/demuxtest). On a mismatch the random test shrinks the sequence
// and prints the smallest one it found, one op a line.

var (
	diffSeed = flag.Uint64("diff.seed", 1, "seed of the differential test's operation generator")
	diffOps  = flag.Int("diff.ops", 0, "operations per configuration (0: 10000, or 2500 with -short)")
	// Verify after every write is the point of the test; the flags let a
	// profile of everything else be taken.
	diffVerify   = flag.Bool("diff.verify", true, "call Table.Verify after every bind, connect and close")
	diffSnapshot = flag.Bool("diff.snapshot", true, "compare the sockets' addresses and options after every write")
)

// diffConfigs are demuxtest.Configs with the flags applied.
func diffConfigs() []demuxtest.Config {
	cs := demuxtest.Configs()
	for i := range cs {
		cs[i].SkipVerify, cs[i].SkipSnapshot = !*diffVerify, !*diffSnapshot
	}
	return cs
}

func TestDifferential(t *testing.T) {
	n := *diffOps
	if n == 0 {
		n = 10000
		if testing.Short() {
			n = 2500
		}
	}
	for ci, c := range diffConfigs() {
		t.Run(c.Name, func(t *testing.T) {
			seed := *diffSeed + uint64(ci)
			r, err := demuxtest.NewRunner(c, seed)
			require.NoError(t, err)
			g := demuxtest.NewGenerator(r, rand.NewPCG(seed, 0xd1ff))
			ops, err := g.Run(n)
			if err != nil {
				last := ops[len(ops)-1]
				var mm *demuxtest.Mismatch
				if !errors.As(err, &mm) {
					t.Fatalf("op %d %v: %v", len(ops)-1, last, err)
				}
				small := demuxtest.Shrink(c, seed, ops, mm.Kind)
				_, serr := demuxtest.Run(c, seed, small)
				t.Fatalf("op %d %v: %v\n\nshrunk sequence (seed %d, table %s):\n%s=> %v",
					len(ops)-1, last, err, seed, c.Name, demuxtest.Format(small), serr)
			}
			for _, missing := range r.Unseen() {
				t.Errorf("the generator never produced %q", missing)
			}
			// Each strategy must have run the paths it is there for.
			st := r.Table().Stats()
			switch c.Table.Strategy {
			case demux.OnePhase:
				assert.Positive(t, st.Lookups.Primary, "primary lookups")
			case demux.TwoPhase:
				assert.Positive(t, st.Lookups.Secondary, "secondary lookups")
				assert.Positive(t, st.BindChecks.Secondary, "indexed bind checks")
			case demux.Hybrid:
				// With the default threshold, chains rarely pass 10
				// sockets here; the threshold-2 runs cover both paths.
				if c.Table.Threshold == 0 {
					break
				}
				assert.Positive(t, st.Lookups.Primary, "primary lookups")
				assert.Positive(t, st.Lookups.Secondary, "secondary lookups")
				assert.Positive(t, st.BindChecks.Primary, "bind checks by scan")
				// The growing tables' bind checks read a port's summary
				// only past 64 sockets, which these runs seldom reach;
				// their two-phase runs check through it from the first.
				if c.Table.Slots != 0 {
					assert.Positive(t, st.BindChecks.Secondary, "secondary bind checks")
				}
			}
			t.Logf("%d ops; %d sockets open at the end; answers: %v; stats: %+v", n, r.Model().Len(), r.Seen(), st)
		})
	}
}

// TestDifferentialCases runs the fixed sequences of diffCases.
func TestDifferentialCases(t *testing.T) {
	for _, tc := range diffCases {
		for _, c := range diffConfigs() {
			t.Run(tc.Name+"/"+c.Name, func(t *testing.T) {
				at, err := demuxtest.Run(c, 1, tc.Ops)
				require.NoError(t, err, "op %d", at)
			})
		}
	}
}
