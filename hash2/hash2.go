// Package hash2 is the secondary socket table: slots keyed by (local
// address, local port). The address part of the key is a seeded xxhash of
// the address's 16-byte form, computed once per lookup (and by writers
// whenever they need an entry's slot: entries do not keep it); the port is
// mixed in afterwards with a seeded multiply (see
// Index), so the exact and wildcard slots of one datagram cost one address
// hash, not two.
//
// "::" hashes as 0.0.0.0 and ::ffff:a.b.c.d as a.b.c.d (callers pass the
// 16-byte forms that package ipv6 defines as keys), so an IPv4 datagram finds
// IPv4, dual-stack and v4-mapped IPv6 sockets in the same two slots.
//
// This is an implementation package of udpdemux, exported only so that the
// module's other packages can use it: its API may change in any release,
// with no compatibility promise. Programs use package demux.
package hash2

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"syscall"

	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// Slot is one secondary slot. Its chain is read without locks; writers hold
// the slot's lock (Table.Lock) and change it through Table's Push, Remove
// and Replace, which keep the slot's summary (see Summary) in step. The
// chain's Seq counts the moves of entries between secondary slots (see
// lookup.SeqCount).
type Slot struct {
	lookup.Chain // guarded by the slot's lock for writes
}

// Table is the secondary table. Its size and seed never change.
type Table struct {
	slots    []Slot
	sums     []atomic.Uint64   // sums[i] is slots[i]'s summary (see Summary)
	locks    []lockorder.Mutex // apart from the slots, which lookups read
	shift    uint8             // 64 - log2(slots)
	mul      uint64            // odd, from the seed: mixes the port into the index
	seed     uint64
	wildHash uint32 // AddrHash(lookup.Wild4)
}

// New makes a table of n slots (a power of two from 256 to 65536) whose
// address hash is seeded with seed.
func New(n int, seed uint64) (*Table, error) {
	if !lookup.ValidSlots(n) {
		return nil, fmt.Errorf("%d slots: want a power of two from %d to %d: %w",
			n, lookup.MinSlots, lookup.MaxSlots, syscall.EINVAL)
	}
	t := &Table{slots: make([]Slot, n), sums: make([]atomic.Uint64, n), locks: make([]lockorder.Mutex, n)}
	t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	t.seed = seed
	// The multiplier is the hash of a constant address, so that it too
	// depends on the seed alone.
	t.mul = lookup.Addr16{Hi: 0x157c4a7fb979379e}.Hash(seed) | 1
	t.wildHash = t.AddrHash(lookup.Wild4)
	return t, nil
}

// Len returns the number of slots.
func (t *Table) Len() int { return len(t.slots) }

// AddrHash returns the address part of the key of the 16-byte address a.
// Callers pass the key form: the wildcard as lookup.Wild4, IPv4 mapped.
func (t *Table) AddrHash(a lookup.Addr16) uint32 {
	h := a.Hash(t.seed)
	return uint32(h) ^ uint32(h>>32)
}

// WildHash returns AddrHash of the wildcard address.
func (t *Table) WildHash() uint32 { return t.wildHash }

// Index returns the slot index for an address hash and a port: the top
// bits of the 48-bit pair times a secret odd multiplier. Linux xors the
// port into the address hash and masks, so ports P and P+slots share every
// slot whatever the seed, and a tenant who binds many sockets on P+slots
// slows every lookup on P; here no two ports share slots by construction.
func (t *Table) Index(addrHash uint32, port uint16) int {
	return int((uint64(addrHash)<<16 | uint64(port)) * t.mul >> t.shift)
}

// Lock takes the lock of slot i through g, which holds a primary slot.
func (t *Table) Lock(g *lockorder.Guard, i int) { g.Secondary(&t.locks[i], i) }

// Lock2 takes the locks of slots i and j through g in ascending order, once
// if i == j.
func (t *Table) Lock2(g *lockorder.Guard, i, j int) {
	g.Secondaries(&t.locks[i], i, &t.locks[j], j)
}

// IndexOf returns the slot index of entry e: its key's hash and its port.
// Entries do not keep the hash: writers, who need it, can afford to compute
// it, and the room is better spent on the lookup's fields.
func (t *Table) IndexOf(e *lookup.Entry) int { return t.Index(t.AddrHash(e.Key()), e.Port) }

// At returns slot i.
func (t *Table) At(i int) *Slot { return &t.slots[i] }
