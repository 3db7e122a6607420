package demux

import (
	"errors"
	"fmt"
)

// Verify checks the table's invariants and returns an error describing
// every violation it finds (DESIGN.md, "Invariants" and "Storage
// engines"): what the storage's engine checks (fixed.Engine.Verify: each
// open socket's current entry is in exactly the primary slot of its port
// and the secondary slot of its address key, and nothing else is, slot
// counts, links, groups; grow.Engine.Verify: port chains, classes and
// their indexes' lines, summaries, groups and connected counts); and for
// both, that the occupancy index (which counts the sockets bound, for
// Len and bind(0)) matches the tables. It is a debugging aid for tests: call it when
// no write is in flight. It costs O(slots + sockets).
func (t *Table[V]) Verify() error {
	var errs []error
	bad := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	seen := t.w.verify(bad)
	ports := map[uint16]int{}
	for e := range seen {
		ports[e.Port]++
	}
	for p, want := range ports {
		if got := t.occ.Users(p); got != want {
			bad("port %d: occupancy index counts %d sockets, tables hold %d", p, got, want)
		}
	}
	// With the counts of every port that holds sockets right, a matching
	// total leaves no count for a port that holds none.
	if got := t.occ.Total(); got != len(seen) {
		bad("occupancy index counts %d sockets in all, tables hold %d", got, len(seen))
	}
	if !t.occ.CheckCounts() {
		bad("occupancy index: the ephemeral range's counts differ from its bitmaps")
	}
	return errors.Join(errs...)
}
