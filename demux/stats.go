package demux

// Stats is a snapshot of a table's shape and of the paths its operations
// took.
type Stats struct {
	Sockets   int        // sockets bound
	Primary   ChainStats // the port table
	Secondary ChainStats // the (address, port) table
	// FourTuple is the table of connected sockets by 4-tuple; the fixed
	// tables have none.
	FourTuple  ChainStats
	Lookups    PathCounts // unicast and multicast lookups, by path, if Config.CountPaths
	BindChecks PathCounts // explicit-port bind conflict checks, by path (Fallback counts as Primary)
}

// ChainStats describes the chains of one table. For the growing tables,
// Used counts keys (ports, addresses, 4-tuples) and Longest and Mean are
// not tracked: a growing table keeps one key per slot or fewer on average.
// The growing (address, port) and 4-tuple tables count as slots the
// positions of their lines, six to a cache line, of which they fill at
// most four on average.
type ChainStats struct {
	Slots   int     // slots in the table
	Used    int     // slots with at least one socket
	Longest int     // the longest chain
	Mean    float64 // mean length of the non-empty chains
}

// Stats returns the table's statistics. It reads every slot: O(slots).
func (t *Table[V]) Stats() Stats {
	st := Stats{Sockets: t.Len(), Lookups: t.stats.lookupCounts()}
	st.BindChecks.Primary = t.stats.bindChecks[0].Load()
	st.BindChecks.Secondary = t.stats.bindChecks[1].Load()
	if t.g != nil {
		p, ps, a, as, c, cs := t.g.Sizes()
		st.Primary = ChainStats{Slots: ps, Used: p}
		st.Secondary = ChainStats{Slots: as, Used: a}
		st.FourTuple = ChainStats{Slots: cs, Used: c}
		return st
	}
	h1, h2 := t.f.Tables()
	st.Primary = chainStats(h1.Len(), func(i int) int { return h1.At(i).Chain.Len() })
	st.Secondary = chainStats(h2.Len(), func(i int) int { return h2.At(i).Chain.Len() })
	return st
}

func chainStats(slots int, length func(int) int) ChainStats {
	c := ChainStats{Slots: slots}
	total := 0
	for i := range slots {
		n := length(i)
		if n == 0 {
			continue
		}
		c.Used++
		total += n
		c.Longest = max(c.Longest, n)
	}
	if c.Used > 0 {
		c.Mean = float64(total) / float64(c.Used)
	}
	return c
}
