package bench

import (
	"errors"
	"testing"
	"time"

	"github.com/udpdemux/udpdemux/bench/suite"
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
	}
	for _, sh := range shapes {
		for _, tg := range suite.Targets {
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
	for _, tg := range []suite.Target{suite.Hybrid, suite.OnePhase, suite.TwoPhase, suite.GVisor} {
		f, _, err := suite.Prepare(tg, sh, suite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := suite.Parallel(f, 0, 2, 50*time.Millisecond, suite.FlatOutWriter)
		f.Close()
		if err != nil || r.Wrong > 0 || r.Lookups == 0 || r.WriterOps == 0 {
			t.Errorf("%s: %+v, %v", tg.Name, r, err)
		}
	}
	for _, tg := range suite.Bind0Targets {
		r, err := suite.Reproduce(tg, 64, 128, 50*time.Millisecond, seed)
		if err != nil || r.Binds == 0 {
			t.Errorf("reproducer %s: %+v, %v", tg.Name, r, err)
		}
	}
}
