package main

// size is a scenario's size: small with -quick, full otherwise.
type size struct{ quick, full int }

// at returns the size for a quick run or a full one.
func (s size) at(quick bool) int {
	if quick {
		return s.quick
	}
	return s.full
}

// The scenarios' sizes.
var (
	aliasingAttackers = size{1000, 100000}
	batchSize         = size{10000, 1000000}
	// churnCount is how many sockets a write measurement binds and closes.
	churnCount        = size{128, 1024}
	groupSize         = size{1000, 100000}
	distinctPortsSize = size{10000, 65000}
	mixedSize         = size{5000, 50000}
)
