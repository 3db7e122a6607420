package lookup

import "sync/atomic"

// SeqCount is a sequence counter: odd while a move is under way. A writer
// that moves an entry from one secondary chain to another makes the count
// of both chains odd for the duration of the move and even again after, so
// that a lookup that searched one chain and then another can tell that an
// entry may have crossed between them.
type SeqCount struct{ v atomic.Uint32 }

// Begin marks the start of a move. The caller holds the slot lock.
func (s *SeqCount) Begin() { s.v.Add(1) }

// End marks the end of a move. The caller holds the slot lock.
func (s *SeqCount) End() { s.v.Add(1) }

// Read returns the count, waiting out a move in progress.
func (s *SeqCount) Read() uint32 {
	for {
		if v := s.v.Load(); v&1 == 0 {
			return v
		}
		spin()
	}
}

// TryRead returns the count and true if no move is under way; if one
// is, it yields once, for the mover to finish, and returns false. A
// reader that bounds its attempts counts a false as one: Read would wait
// for as long as writers keep moving.
func (s *SeqCount) TryRead() (uint32, bool) {
	if v := s.v.Load(); v&1 == 0 {
		return v, true
	}
	spin()
	return 0, false
}

// Moving reports whether a move is under way, without waiting for it:
// for checks made when no write should be in flight, where Read would
// wait forever on a count a writer left odd.
func (s *SeqCount) Moving() bool { return s.v.Load()&1 != 0 }

// Peek returns the count without waiting: odd while a move is under way.
func (s *SeqCount) Peek() uint32 { return s.v.Load() }

// Changed reports whether the count differs from v, a value Read or Peek
// returned.
func (s *SeqCount) Changed(v uint32) bool { return s.v.Load() != v }
