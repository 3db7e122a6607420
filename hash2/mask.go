package hash2

import (
	"github.com/udpdemux/udpdemux/internal/sock"
)

// A slot's key mask is a word of 32 bits beside it, in an array a quarter
// of the size of the slots': each entry of the slot's chain sets the bit
// that the top five bits of its key's address hash pick. A lookup reads
// the mask of its exact-address slot, and skips the chain when neither
// its destination's bit nor the wildcard's is set: the entries of other
// addresses that share the slot are passed over without a load of any of
// them. With as many sockets as slots, a datagram to an address that only
// a wildcard socket serves finds about one such entry in its exact slot,
// and the load of it was most of its lookup's time: at 65 536 sockets on
// one port, such a lookup went from 76 to 38 ns (go test -bench in bench/,
// the builds in turn, three runs each).
//
// Entries kept in the slot itself, with tags, were tried first: slots of a
// cache line made the table four times larger, and lookups at 256 to
// 4 096 sockets 2 to 10 ns slower in the runner.
//
// The mask never lacks the bit of an entry that stays in the chain, so
// a lookup that reads it at any moment meets every such entry: a new
// entry's bit is set before the entry is linked, and a removal or a
// replacement recomputes the mask from the chain after it unlinks. A
// lookup that reads the mask between the two may see the bit of an entry
// that has left; that costs it a walk, never an answer.
//
// A recomputation walks the chain and hashes each entry's address, so
// it is done only where the chain left behind holds at most exactMax
// entries: longer chains keep the bits of entries that left. Recomputing
// always made a close O(chain) where it had been O(1): 30 000 sockets on
// one address in 4 096 slots took 86 µs a close, against 0.4 µs before
// the mask. A chain that long sets most of the 32 bits anyway, and a
// removal that brings it down to exactMax makes the mask exact again. So
// the mask is always a superset of its chain's bits, and exactly its
// chain's while the chain holds at most exactMax entries (VerifyMask).

// exactMax is the longest chain whose mask a removal recomputes.
const exactMax = 8

// bit returns the mask bit of an address hash.
func bit(h uint32) uint32 { return 1 << (h >> 27) }

// MayHold reports whether slot i may hold an entry whose key hashes to h
// or wild: false means it holds none.
func (t *Table) MayHold(i int, h, wild uint32) bool {
	return t.masks[i].Load()&(bit(h)|bit(wild)) != 0
}

// Push links e at the head of slot i's chain, setting its mask bit
// first. The caller holds the slot's lock.
func (t *Table) Push(i int, e *sock.Entry) {
	t.masks[i].Or(bit(t.AddrHash(e.Key())))
	t.slots[i].PushFront(&e.N2)
}

// Remove unlinks e from slot i, then recomputes the slot's mask if the
// chain is short enough (exactMax). The caller holds the slot's lock.
func (t *Table) Remove(i int, e *sock.Entry) {
	t.slots[i].Chain.Remove(&e.N2)
	t.tighten(i)
}

// Replace puts e in old's place in slot i: it sets e's mask bit, swaps
// the entries, then recomputes the mask if the chain is short enough.
// The caller holds the slot's lock.
func (t *Table) Replace(i int, old, e *sock.Entry) {
	t.masks[i].Or(bit(t.AddrHash(e.Key())))
	t.slots[i].Chain.Replace(&old.N2, &e.N2)
	t.tighten(i)
}

// tighten recomputes slot i's mask from its chain, after an unlink, if
// the chain holds at most exactMax entries.
func (t *Table) tighten(i int) {
	if t.slots[i].Len() <= exactMax {
		t.masks[i].Store(t.mask(i))
	}
}

// mask returns the mask of slot i's chain as it is.
func (t *Table) mask(i int) uint32 {
	var sum uint32
	for n := t.slots[i].First(); n != nil; n = n.Next.Load() {
		sum |= bit(t.AddrHash(sock.OfSecondary(n).Key()))
	}
	return sum
}

// VerifyMask checks that slot i's mask holds its chain's bits, and no
// other while the chain holds at most exactMax entries, calling bad if
// not. Call it when no write is in flight.
func (t *Table) VerifyMask(i int, bad func(format string, args ...any)) {
	got, want := t.masks[i].Load(), t.mask(i)
	switch {
	case got&want != want:
		bad("secondary slot %d: mask %#x lacks bits of the chain's %#x", i, got, want)
	case got != want && t.slots[i].Len() <= exactMax:
		bad("secondary slot %d: mask %#x, chain's %#x, of %d entries", i, got, want, t.slots[i].Len())
	}
}
