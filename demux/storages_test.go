package demux_test

import (
	"testing"
	"time"

	"github.com/udpdemux/udpdemux/demux"
)

// storage is one of the table's two storages, named for subtests.
type storage struct {
	name string
	cfg  demux.Config
}

// storages are the two storages, for the tests that must run on both:
// every concurrency and stress test of the package runs on each, as a
// subtest named by the storage.
var storages = []storage{
	{"default", demux.Config{}},
	{"slots256", demux.Config{Slots: 256}},
}

// with returns cfg on this storage: cfg with the storage's slot count.
func (st storage) with(cfg demux.Config) demux.Config {
	cfg.Slots = st.cfg.Slots
	return cfg
}

// stressBudget bounds how long one subtest of a stress test runs: d, a
// quarter of it with -short, and never more than a fiftieth of the time
// left before -timeout ends the test binary. A stress test also stops on
// an operation count where it has one; what it must have done whatever
// the budget (rounds, races seen) it checks on its own.
func stressBudget(t *testing.T, d time.Duration) time.Duration {
	if testing.Short() {
		d /= 4
	}
	if end, ok := t.Deadline(); ok {
		d = min(d, time.Until(end)/50)
	}
	return d
}
