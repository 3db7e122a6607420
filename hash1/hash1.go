// Package hash1 is the primary socket table: slots keyed by local port
// (port & mask), each with a chain of every socket whose port falls in it
// and that chain's length. Binds with port 0, wildcard binds and lookups on
// short chains use it.
//
// This is an implementation package of udpdemux, exported only so that the
// module's other packages can use it: its API may change in any release,
// with no compatibility promise. Programs use package demux.
package hash1

import (
	"fmt"
	"syscall"

	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// defaultSlots is the table size used when none is configured.
const defaultSlots = 4096

// Slot is one primary slot. Its chain is read without locks; writers hold
// the slot's lock (Table.LockPort).
type Slot struct {
	Chain lookup.Chain // guarded by the slot's lock for writes
}

// Table is the primary table. Its size never changes. The locks live apart
// from the slots, so that the slots that lookups read stay dense.
type Table struct {
	slots []Slot
	locks []lockorder.Mutex
	mask  uint32
}

// New makes a table of n slots; n must be a power of two from 256 to 65536,
// or 0 for defaultSlots.
func New(n int) (*Table, error) {
	if n == 0 {
		n = defaultSlots
	}
	if !lookup.ValidSlots(n) {
		return nil, fmt.Errorf("%d slots: want a power of two from %d to %d: %w",
			n, lookup.MinSlots, lookup.MaxSlots, syscall.EINVAL)
	}
	return &Table{slots: make([]Slot, n), locks: make([]lockorder.Mutex, n), mask: uint32(n - 1)}, nil
}

// Len returns the number of slots.
func (t *Table) Len() int { return len(t.slots) }

// Index returns the slot index of port.
func (t *Table) Index(port uint16) int { return int(uint32(port) & t.mask) }

// Slot returns the slot of port.
func (t *Table) Slot(port uint16) *Slot { return &t.slots[uint32(port)&t.mask] }

// LockPort takes the lock of port's slot through g.
func (t *Table) LockPort(g *lockorder.Guard, port uint16) {
	i := t.Index(port)
	g.Primary(&t.locks[i], i)
}

// At returns slot i.
func (t *Table) At(i int) *Slot { return &t.slots[i] }
