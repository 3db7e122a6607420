package hash2

import "sync/atomic"

// seqCount is a sequence counter: odd while a move is under way.
type seqCount struct{ v atomic.Uint32 }

// Begin marks the start of a move. The caller holds the slot lock.
func (s *seqCount) Begin() { s.v.Add(1) }

// End marks the end of a move. The caller holds the slot lock.
func (s *seqCount) End() { s.v.Add(1) }

// Read returns the count, waiting out a move in progress.
func (s *seqCount) Read() uint32 {
	for {
		if v := s.v.Load(); v&1 == 0 {
			return v
		}
		spin()
	}
}

// Changed reports whether the count differs from v, a value Read returned.
func (s *seqCount) Changed(v uint32) bool { return s.v.Load() != v }
