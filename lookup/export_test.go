package lookup

// What the external tests use: they build entries with package ipv6,
// which imports lookup.
var (
	Score     = score
	MustQuery = query
)

const (
	ExactTier  = exactTier
	Hash4Score = hash4Score
)
