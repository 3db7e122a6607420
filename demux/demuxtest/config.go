package demuxtest

import (
	"fmt"

	"github.com/udpdemux/udpdemux/demux"
)

// Ports of the differential test: a tiny ephemeral range so that bind(0)
// fills it, and explicit ports of which some pairs share a primary slot of a
// 256-slot table (5353/5609, 40000/40256) and some lie in the range.
const (
	portLow, portHigh = 40000, 40015
	portReserved      = 40005
)

var ports = []uint16{5353, 5609, 40000, 40003, 40256}

// Config is one table configuration of the module's tests: a storage and a
// strategy.
type Config struct {
	// Name names the configuration's subtests: the storage (fixed256 and
	// fixed4096, Linux's fixed slots; grow, the growing tables of the
	// default configuration), then the strategy.
	Name string
	// Table sets the storage and the strategy only (Slots, Strategy,
	// Threshold, Ephemeral), so that a test can take a copy and add its
	// own settings. NewRunner adds the differential test's port range,
	// path counting and a Rand seeded from its seed.
	Table demux.Config
	// SkipVerify leaves out Table.Verify after every write, and
	// SkipSnapshot the comparison of the sockets' addresses and options:
	// only for profiling the rest.
	SkipVerify, SkipSnapshot bool
}

// Configs returns every table configuration that the module's tests run
// on: Linux's fixed slots under every strategy and bind(0) algorithm, and
// the growing tables of the default configuration (Slots 0) under every
// strategy. The fixed slots are mostly 256, so that ports share chains
// (the differential test's ports collide there), and once 4096, Linux's
// size on a small machine, where they rarely do. This is the one list to
// extend when a configuration is added; a test that runs on fewer takes
// Storages, Strategies or Named, and says why.
func Configs() []Config {
	fixed := func(slots int, s demux.Strategy, threshold int) demux.Config {
		return demux.Config{Slots: slots, Strategy: s, Threshold: threshold}
	}
	grow := func(s demux.Strategy, threshold int) demux.Config {
		return demux.Config{Strategy: s, Threshold: threshold}
	}
	bitmap := fixed(256, demux.Hybrid, 2)
	bitmap.Ephemeral = demux.EphemeralBitmap
	// The differential tests seed each configuration from its index:
	// configurations are added at the end, so that the others keep their
	// seeds.
	return []Config{
		{Name: "fixed256/OnePhase", Table: fixed(256, demux.OnePhase, 0)},
		{Name: "fixed256/TwoPhase", Table: fixed(256, demux.TwoPhase, 0)},
		{Name: "fixed256/Hybrid/threshold2", Table: fixed(256, demux.Hybrid, 2)},
		{Name: "fixed256/Hybrid/default", Table: fixed(256, demux.Hybrid, 0)},
		{Name: "fixed256/Hybrid/threshold2/bitmap", Table: bitmap},
		{Name: "grow/OnePhase", Table: grow(demux.OnePhase, 0)},
		{Name: "grow/TwoPhase", Table: grow(demux.TwoPhase, 0)},
		{Name: "grow/Hybrid/threshold2", Table: grow(demux.Hybrid, 2)},
		{Name: "grow/Hybrid/default", Table: grow(demux.Hybrid, 0)},
		// Threshold 1 sends every port with two sockets to the
		// indexes.
		{Name: "fixed256/Hybrid/threshold1", Table: fixed(256, demux.Hybrid, 1)},
		{Name: "grow/Hybrid/threshold1", Table: grow(demux.Hybrid, 1)},
		{Name: "fixed4096/Hybrid/default", Table: fixed(4096, demux.Hybrid, 0)},
	}
}

// Storages returns, of Configs, each storage under its default strategy
// (Hybrid, default threshold, default bind(0) algorithm): for the tests
// whose subject is the storage rather than the strategy, most of them
// stress tests that run for a time budget per configuration.
func Storages() []Config {
	return Named("grow/Hybrid/default", "fixed256/Hybrid/default")
}

// Strategies returns, of Configs, both storages under each strategy with
// its defaults: for the tests whose subject is the strategy but which run
// on a time budget, or a cost, per configuration too large for all of
// Configs.
func Strategies() []Config {
	return Named("grow/Hybrid/default", "grow/OnePhase", "grow/TwoPhase",
		"fixed256/Hybrid/default", "fixed256/OnePhase", "fixed256/TwoPhase")
}

// Named returns the configurations of Configs with the given names, in
// that order. It panics on a name that Configs does not hold, so that a
// test's subset cannot drift from the list unnoticed.
func Named(names ...string) []Config {
	all := Configs()
	out := make([]Config, 0, len(names))
next:
	for _, n := range names {
		for _, c := range all {
			if c.Name == n {
				out = append(out, c)
				continue next
			}
		}
		panic(fmt.Sprintf("demuxtest: no configuration %q", n))
	}
	return out
}
