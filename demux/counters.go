package demux

import (
	"sync/atomic"

	"github.com/udpdemux/udpdemux/lookup"
)

// stripes spreads the lookup counters over cache lines, so that lookups on
// different cores rarely write the same line.
const stripes = 16

type stripe struct {
	path [3]atomic.Uint64 // by lookup.Path
	_    [40]byte
}

// counters are the table's path statistics.
type counters struct {
	lookups    [stripes]stripe
	bindChecks [2]atomic.Uint64 // primary, secondary
}

func (c *counters) lookup(p lookup.Path, q *lookup.Query) {
	i := (q.SrcPort ^ q.DstPort ^ uint16(q.Key.Lo)) & (stripes - 1)
	c.lookups[i].path[p].Add(1)
}

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
	var p PathCounts
	for i := range c.lookups {
		s := &c.lookups[i]
		p.Primary += s.path[lookup.Primary].Load()
		p.Secondary += s.path[lookup.Secondary].Load()
		p.Fallback += s.path[lookup.Fallback].Load()
	}
	return p
}
