package main

import "time"

// byRun is a scenario's parameter that depends on the run: small with
// -quick, full otherwise.
type byRun[T any] struct{ quick, full T }

// at returns the value for a quick run or a full one.
func (s byRun[T]) at(quick bool) T {
	if quick {
		return s.quick
	}
	return s.full
}

// The scenarios' sizes.
var (
	aliasingAttackers = byRun[int]{1000, 100000}
	floodAttackers    = byRun[int]{1000, 100000}
	batchSize         = byRun[int]{10000, 1000000}
	// churnCount is how many sockets a write measurement binds and closes.
	churnCount        = byRun[int]{128, 1024}
	groupSize         = byRun[int]{1000, 100000}
	distinctPortsSize = byRun[int]{10000, 65000}
	mixedSize         = byRun[int]{5000, 50000}
)

// The scenarios' durations.
var (
	// tableBudget is the longest a scenario may spend building one table.
	tableBudget = byRun[time.Duration]{15 * time.Second, 60 * time.Second}
	// aliasingBudget is tableBudget for the aliasing scenario, whose fixed
	// 4 096-slot table checks each of 100 000 binds on one address and port
	// by scanning the chain of those before it, as Linux does: its builds
	// took about 70 seconds here (68.6 and 72.4 in one timing), past
	// tableBudget.
	aliasingBudget = byRun[time.Duration]{15 * time.Second, 150 * time.Second}
	// parallelTime is the length of one parallel measurement.
	parallelTime = byRun[time.Duration]{100 * time.Millisecond, 300 * time.Millisecond}
	// parallelPairs is how many pairs of parallel measurements (1 goroutine
	// and 2) a row takes at least (-runs if more). A ratio of two rates takes the noise of both,
	// and this machine's neighbours come and go within a row: with 3
	// pairs, the same lookup code's worst speed-up read 1.46× in one full
	// run and 1.87× in another.
	parallelPairs = byRun[int]{1, 5}
	// reproTime is how long the bind(0) reproducer runs per contender.
	reproTime = byRun[time.Duration]{200 * time.Millisecond, 2 * time.Second}
)
