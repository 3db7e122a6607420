package bench

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bench/suite"
	"github.com/udpdemux/udpdemux/demux"
)

// TestContendersAgree loads small versions of every lookup shape into
// every contender and checks that each finds the right socket for every
// datagram, so that the benchmarks time correct lookups.
func TestContendersAgree(t *testing.T) {
	shapes := []*suite.Shape{
		suite.SamePort(300, 256, seed),
		suite.DistinctPorts(2000, 1024, seed),
		suite.PerPort(2048, 16, 256, seed),
		suite.Mixed(1000, 1024, seed),
		suite.Connected(300, seed),
		suite.ReusePortGroup(200, seed),
		suite.Aliased(300, false, seed),
		suite.Aliased(300, true, seed),
	}
	for _, sh := range shapes {
		for _, tg := range append(suite.Targets, suite.Default, suite.Fixed4096) {
			f, _, err := suite.Prepare(tg, sh, suite.Options{})
			if err != nil {
				t.Errorf("%s on %s: %v", tg.Name, sh.Name, err)
				continue
			}
			for i, set := range sh.Sets {
				if err := f.Check(i, 0); err != nil {
					t.Errorf("%s on %s, set %s: %v", tg.Name, sh.Name, set.Name, err)
				}
			}
			f.Close()
		}
	}
}

// TestBind0Fixtures checks that every bind(0) contender picks a free port,
// or fails when none is.
func TestBind0Fixtures(t *testing.T) {
	for _, free := range []int{100, 1, 0} {
		for _, tg := range append(suite.Bind0Targets, suite.Kernel) {
			f, err := suite.PrepareBind0(tg, free, seed)
			if err == nil {
				err = f.Check()
				f.Close()
			}
			if errors.Is(err, suite.ErrNoNamespace) {
				t.Logf("%s: %v", tg.Name, err)
				continue
			}
			if err != nil {
				t.Errorf("%s, %d free: %v", tg.Name, free, err)
			}
		}
	}
}

// TestParallelAndReproducer runs short parallel lookups with a writer and
// a short reproducer, checking that no lookup finds the wrong socket and
// that the tables stay consistent.
func TestParallelAndReproducer(t *testing.T) {
	sh := suite.SamePort(512, 256, seed)
	for _, tg := range []suite.Target{suite.Hybrid, suite.OnePhase, suite.TwoPhase, suite.Default, suite.GVisor} {
		f, _, err := suite.Prepare(tg, sh, suite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// On a loaded machine (or under -race) a short window may end
		// before the writer's first bind: widen it until both sides ran.
		d := 50 * time.Millisecond
		for try := 0; ; try++ {
			r, err := suite.Parallel(f, 0, 2, d, suite.FlatOutWriter)
			if err != nil || r.Wrong > 0 {
				t.Errorf("%s: %+v, %v", tg.Name, r, err)
				break
			}
			if r.Lookups > 0 && r.WriterOps > 0 {
				break
			}
			if try == 4 {
				t.Errorf("%s: no progress in %v: %+v", tg.Name, d, r)
				break
			}
			d *= 2
		}
		f.Close()
	}
	for _, tg := range suite.Bind0Targets {
		r, err := suite.Reproduce(tg, 64, 128, 50*time.Millisecond, seed)
		if err != nil || r.Binds == 0 {
			t.Errorf("reproducer %s: %+v, %v", tg.Name, r, err)
		}
	}
}

// TestMixedSharedPorts checks the mixed shape past one client per port:
// every client keeps a 4-tuple of its own, and every contender agrees.
func TestMixedSharedPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("binds 56 000 sockets per contender")
	}
	sh := suite.Mixed(56000, 0, seed)
	seen := map[[2]string]bool{}
	for _, s := range sh.Socks {
		k := [2]string{s.Key().String(), s.Remote.String()}
		require.False(t, seen[k], "two sockets with the 4-tuple %v", k)
		seen[k] = true
	}
	for _, tg := range []suite.Target{suite.Default, suite.GVisor, suite.Floor} {
		f, _, err := suite.Prepare(tg, sh, suite.Options{})
		require.NoError(t, err, tg.Name)
		for i, set := range sh.Sets {
			assert.NoError(t, f.Check(i, 0), "%s, set %s", tg.Name, set.Name)
		}
		f.Close()
	}
}

// TestWritesAtSize checks that binding, connecting and closing more
// sockets works on every contender, and that the batch lookup finds what
// single lookups find.
func TestWritesAtSize(t *testing.T) {
	sh := suite.Connected(500, seed)
	for _, tg := range []suite.Target{suite.Default, suite.Fixed4096, suite.GVisor, suite.Floor} {
		f, _, err := suite.Prepare(tg, sh, suite.Options{})
		require.NoError(t, err, tg.Name)
		bind, cl, err := f.(suite.Churner).Churn(sh.Churn)
		require.NoError(t, err, tg.Name)
		assert.Positive(t, bind, tg.Name)
		assert.Positive(t, cl, tg.Name)
		if d, ok := f.(interface{ Table() *demux.Table[int32] }); ok {
			assert.Equal(t, len(sh.Socks), d.Table().Len(), "%s: the churn left sockets behind", tg.Name)
			assert.NoError(t, f.Verify())
		}
		for i := range sh.Sets {
			assert.NoError(t, f.Check(i, 0), "%s after the churn", tg.Name)
			if b, ok := f.(suite.Batcher); ok {
				assert.NoError(t, b.CheckBatch(i, 0), "%s batch", tg.Name)
			}
		}
		f.Close()
	}
}

// TestBudget checks that a build past its budget gives up with ErrBudget.
func TestBudget(t *testing.T) {
	_, _, err := suite.Prepare(suite.Default, suite.SamePort(4096, 0, seed), suite.Options{Budget: time.Nanosecond})
	assert.ErrorIs(t, err, suite.ErrBudget)
}

// TestResize grows a small table under lookups: no lookup may miss.
func TestResize(t *testing.T) {
	r, err := suite.Resize(100, 5000, 2, seed, 0)
	require.NoError(t, err)
	assert.Zero(t, r.Wrong)
	assert.Positive(t, r.Lookups)
	assert.Positive(t, r.LookupsAtSize)
	assert.Positive(t, r.Worst)
}
