package demux

import (
	"sync/atomic"

	"github.com/udpdemux/udpdemux/lookup"
)

// counters are the table's path statistics. The lookup counts are one
// shared set: spreading them over cache lines by flow was measured to be
// slower on two cores, not faster (see Config.CountPaths).
type counters struct {
	lookups    [3]atomic.Uint64 // by lookup.Path; only with Config.CountPaths
	bindChecks [2]atomic.Uint64 // primary, secondary
}

func (c *counters) lookup(p lookup.Path) { c.lookups[p].Add(1) }

func (c *counters) bindCheck(secondary bool) {
	if secondary {
		c.bindChecks[1].Add(1)
	} else {
		c.bindChecks[0].Add(1)
	}
}

// PathCounts counts operations by the path they took.
type PathCounts struct {
	Primary   uint64 // scanned the port's primary chain
	Secondary uint64 // searched the secondary slots
	Fallback  uint64 // hybrid chose the secondary table, found a longer slot, scanned the primary chain
}

func (c *counters) lookupCounts() PathCounts {
	return PathCounts{
		Primary:   c.lookups[lookup.Primary].Load(),
		Secondary: c.lookups[lookup.Secondary].Load(),
		Fallback:  c.lookups[lookup.Fallback].Load(),
	}
}
