package demux

// Strategy selects how lookups and explicit-port bind checks search the
// tables. All strategies give the same answers; they differ in cost. Only
// benchmarks and tests need anything but Hybrid.
type Strategy uint8

const (
	// Hybrid is Linux 2.6.33's rule: search the secondary table when the
	// port's primary chain holds more than Config.Threshold sockets, unless
	// the secondary slot is longer than the primary one; else scan the
	// primary chain.
	Hybrid Strategy = iota
	// OnePhase always scans the port's primary chain.
	OnePhase
	// TwoPhase always searches the exact-address secondary slot, then the
	// wildcard one.
	TwoPhase
)

// String returns the strategy's name.
func (s Strategy) String() string {
	switch s {
	case Hybrid:
		return "hybrid"
	case OnePhase:
		return "one-phase"
	case TwoPhase:
		return "two-phase"
	}
	return "strategy(?)"
}

// Ephemeral selects the bind(0) algorithm.
type Ephemeral uint8

const (
	// EphemeralIndex picks uniformly among the ports of the range that no
	// socket uses, from an occupancy index, and fails at once when every
	// port holds a socket that blocks any new one. When every port is in
	// use but some may be shared (SO_REUSEADDR, other addresses), it falls
	// back to EphemeralBitmap.
	EphemeralIndex Ephemeral = iota
	// EphemeralBitmap is Linux's algorithm since 2.6.30: from a random
	// primary chain, scan each chain once into a bitmap of the ports in
	// conflict, and walk that chain's ports by an odd multiple of the table
	// size.
	EphemeralBitmap
	// EphemeralLinear is the algorithm before the 2009 fix: probe port
	// after port, rescanning the chain for each. For benchmarks only.
	EphemeralLinear
)

// String returns the algorithm's name.
func (e Ephemeral) String() string {
	switch e {
	case EphemeralIndex:
		return "index"
	case EphemeralBitmap:
		return "bitmap"
	case EphemeralLinear:
		return "linear"
	}
	return "ephemeral(?)"
}
