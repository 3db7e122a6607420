package demuxtest

import "github.com/udpdemux/udpdemux/demux"

// Ports of the differential test: a tiny ephemeral range so that bind(0)
// fills it, and explicit ports of which some pairs share a primary slot of a
// 256-slot table (5353/5609, 40000/40256) and some lie in the range.
const (
	portLow, portHigh = 40000, 40015
	portReserved      = 40005
)

var ports = []uint16{5353, 5609, 40000, 40003, 40256}

// Config is one table configuration of the differential test.
type Config struct {
	// Name names the configuration's subtest.
	Name string
	// Table configures the table; NewRunner gives it a Rand seeded from
	// its seed, so that a run replays.
	Table demux.Config
	// preferUnused: bind(0) must pick an unused port when there is one
	// (the index algorithm does; Linux's bitmap walk need not).
	preferUnused bool
	// SkipVerify leaves out Table.Verify after every write, and
	// SkipSnapshot the comparison of the sockets' addresses and options:
	// only for profiling the rest.
	SkipVerify, SkipSnapshot bool
}

// Configs returns the table configurations every differential test runs
// on: fixed-slot tables under every strategy and bind(0) algorithm, and the
// growing tables of the default configuration (Slots 0) under every
// strategy. This is the one list to extend when a configuration is added.
func Configs() []Config {
	with := func(slots int, f func(*demux.Config)) demux.Config {
		c := demux.Config{Slots: slots, PortLow: portLow, PortHigh: portHigh, ReservedPorts: []uint16{portReserved}, CountPaths: true}
		f(&c)
		return c
	}
	const fixed = 256
	return []Config{
		{Name: "OnePhase", Table: with(fixed, func(c *demux.Config) { c.Strategy = demux.OnePhase }), preferUnused: true},
		{Name: "TwoPhase", Table: with(fixed, func(c *demux.Config) { c.Strategy = demux.TwoPhase }), preferUnused: true},
		{Name: "Hybrid/threshold2", Table: with(fixed, func(c *demux.Config) { c.Strategy = demux.Hybrid; c.Threshold = 2 }), preferUnused: true},
		{Name: "Hybrid/default", Table: with(fixed, func(c *demux.Config) { c.Strategy = demux.Hybrid }), preferUnused: true},
		{Name: "Hybrid/threshold2/bitmap", Table: with(fixed, func(c *demux.Config) {
			c.Strategy = demux.Hybrid
			c.Threshold = 2
			c.Ephemeral = demux.EphemeralBitmap
		})},
		// The growing tables (the default storage) under every strategy;
		// last, so that the seeds of the others (the test's seed plus the
		// index) stay as they were.
		{Name: "grow/OnePhase", Table: with(0, func(c *demux.Config) { c.Strategy = demux.OnePhase }), preferUnused: true},
		{Name: "grow/TwoPhase", Table: with(0, func(c *demux.Config) { c.Strategy = demux.TwoPhase }), preferUnused: true},
		{Name: "grow/Hybrid/threshold2", Table: with(0, func(c *demux.Config) { c.Threshold = 2 }), preferUnused: true},
		{Name: "grow/Hybrid/default", Table: with(0, func(c *demux.Config) {}), preferUnused: true},
	}
}
