package lookup

import "runtime"

// spin yields while a writer finishes a move; a move is a few pointer
// stores under a lock, so this is rare and short.
func spin() { runtime.Gosched() }
