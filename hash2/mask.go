package hash2

import (
	"github.com/udpdemux/udpdemux/lookup"
)

// A slot's summary is a word of 64 bits beside it, in an array half the
// size of the slots', that a lookup reads in one load: a key mask in its
// low half and a twin count in its high half.
//
// The key mask: each entry of the slot's chain sets the bit that the top
// five bits of its key's address hash pick. A lookup skips the chain when
// neither its destination's bit nor the wildcard's is set: the entries of
// other addresses that share the slot are passed over without a load of
// any of them. With as many sockets as slots, a datagram to an address
// that only a wildcard socket serves finds about one such entry in its
// exact slot, and the load of it was most of its lookup's time, which the
// mask spares (go test -bench in bench/, at 65 536 sockets on one port).
//
// Entries kept in the slot itself, with tags, were tried first: slots of a
// cache line made the table four times larger, and lookups at 256 to
// 4 096 sockets slower in the runner.
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
// always made a close O(chain) where it had been O(1), which with tens of
// thousands of sockets on one address is a walk of thousands of entries
// a close. A chain that long sets most of the 32 bits anyway, and a
// removal that brings it down to exactMax makes the mask exact again. So
// the mask is always a superset of its chain's bits, and exactly its
// chain's while the chain holds at most exactMax entries (VerifySummary).
//
// The twin count is odd while the chain may hold twins: two entries of
// one key and port. While it is even, at most one entry of the chain can
// take a datagram to a given address and port in any slot but the
// wildcard's, so a lookup may stop the walk there (Distinct, Unchanged):
// with a million sockets on one port in 65 536 slots, chains of about 16,
// it loads about half the chain instead of all of it. A writer makes the count
// odd before it links an entry that has a twin in the chain, and even
// again only after an unlink, when the chain it recomputes (at most
// exactMax entries, as for the mask) holds no twins; so it only grows,
// and a lookup that reads the same even count before and after its walk
// knows that no twins were in the chain at any moment in between. A new
// entry is compared with at most twinScanMax others; past that the count
// is made odd without a look, which only costs lookups the early stop.

// exactMax is the longest chain whose summary a removal recomputes.
const exactMax = 8

// twinScanMax is the longest chain that a new entry is compared with to
// keep the twin count even.
const twinScanMax = 64

// twinOne is one step of the twin count, in the summary's high half.
const twinOne = 1 << 32

// bit returns the mask bit of an address hash.
func bit(h uint32) uint32 { return 1 << (h >> 27) }

// Summary is a slot's summary as one load read it: its key mask and twin
// count.
type Summary uint64

// Summary returns slot i's summary.
func (t *Table) Summary(i int) Summary { return Summary(t.sums[i].Load()) }

// MayHold reports whether the slot may hold an entry whose key hashes to h
// or wild: false means it holds none.
func (s Summary) MayHold(h, wild uint32) bool { return uint32(s)&(bit(h)|bit(wild)) != 0 }

// Distinct reports whether the slot held no twins, no two entries of one
// key and port, when s was read.
func (s Summary) Distinct() bool { return s&twinOne == 0 }

// Unchanged reports whether slot i's twin count is still s's: with a
// Distinct s, the slot has held no twins since s was read.
func (t *Table) Unchanged(i int, s Summary) bool { return (t.sums[i].Load()^uint64(s))>>32 == 0 }

// Push links e at the head of slot i's chain, setting its mask bit and,
// if it has a twin there, the twin count odd first. The caller holds the
// slot's lock.
func (t *Table) Push(i int, e *lookup.Entry) {
	t.note(i, e, nil)
	t.slots[i].PushFront(&e.N2)
}

// Remove unlinks e from slot i, then recomputes the slot's summary if the
// chain is short enough (exactMax). The caller holds the slot's lock.
func (t *Table) Remove(i int, e *lookup.Entry) {
	t.slots[i].Chain.Remove(&e.N2)
	t.tighten(i)
}

// Replace puts e in old's place in slot i: it notes e as Push does (old
// does not count as its twin), swaps the entries, then recomputes the
// summary if the chain is short enough. The caller holds the slot's lock.
func (t *Table) Replace(i int, old, e *lookup.Entry) {
	t.note(i, e, old)
	t.slots[i].Chain.Replace(&old.N2, &e.N2)
	t.tighten(i)
}

// note sets e's mask bit in slot i's summary and, if the chain has a twin
// of e other than except (or is too long to look), makes the twin count
// odd, in one store, before e is linked.
func (t *Table) note(i int, e *lookup.Entry, except *lookup.Entry) {
	s := t.sums[i].Load()
	s |= uint64(bit(t.AddrHash(e.Key())))
	if s&twinOne == 0 && t.hasTwin(i, e, except) {
		s += twinOne
	}
	t.sums[i].Store(s)
}

// hasTwin reports whether slot i's chain holds an entry other than except
// with e's key and port, or is longer than twinScanMax.
func (t *Table) hasTwin(i int, e, except *lookup.Entry) bool {
	if t.slots[i].Len() > twinScanMax {
		return true
	}
	k := e.Key()
	for n := t.slots[i].First(); n != nil; n = n.Next.Load() {
		if x := lookup.OfSecondary(n); x != except && x.Port == e.Port && x.Key() == k {
			return true
		}
	}
	return false
}

// tighten recomputes slot i's summary from its chain, after an unlink, if
// the chain holds at most exactMax entries: the mask as it is, and the
// twin count even unless twins remain.
func (t *Table) tighten(i int) {
	if t.slots[i].Len() > exactMax {
		return
	}
	s := t.sums[i].Load()
	if s&twinOne != 0 && !t.twins(i) {
		s += twinOne
	}
	t.sums[i].Store(s&^0xffff_ffff | uint64(t.mask(i)))
}

// mask returns the mask of slot i's chain as it is.
func (t *Table) mask(i int) uint32 {
	var sum uint32
	for n := t.slots[i].First(); n != nil; n = n.Next.Load() {
		sum |= bit(t.AddrHash(lookup.OfSecondary(n).Key()))
	}
	return sum
}

// twinKey is what makes two entries twins.
type twinKey struct {
	key  lookup.Addr16
	port uint16
}

// twins reports whether slot i's chain holds twins: by comparing each
// entry with the others (hasTwin) in a chain of at most exactMax entries,
// which a close recounts and must not allocate for, and with a set in a
// longer one, which only VerifySummary counts, on chains that may hold any
// number of entries.
func (t *Table) twins(i int) bool {
	if t.slots[i].Len() > exactMax {
		seen := map[twinKey]bool{}
		for n := t.slots[i].First(); n != nil; n = n.Next.Load() {
			e := lookup.OfSecondary(n)
			k := twinKey{e.Key(), e.Port}
			if seen[k] {
				return true
			}
			seen[k] = true
		}
		return false
	}
	for n := t.slots[i].First(); n != nil; n = n.Next.Load() {
		if e := lookup.OfSecondary(n); t.hasTwin(i, e, e) {
			return true
		}
	}
	return false
}

// VerifySummary checks slot i's summary against its chain, calling bad if
// it does not hold: the mask holds the chain's bits, and no other while
// the chain holds at most exactMax entries; the twin count is odd if the
// chain holds twins, and even if it holds none and at most exactMax
// entries. Call it when no write is in flight.
func (t *Table) VerifySummary(i int, bad func(format string, args ...any)) {
	s := t.Summary(i)
	got, want, twins := uint32(s), t.mask(i), t.twins(i)
	short := t.slots[i].Len() <= exactMax
	switch {
	case got&want != want:
		bad("secondary slot %d: mask %#x lacks bits of the chain's %#x", i, got, want)
	case got != want && short:
		bad("secondary slot %d: mask %#x, chain's %#x, of %d entries", i, got, want, t.slots[i].Len())
	}
	switch {
	case twins && s.Distinct():
		bad("secondary slot %d: twin count even, but the chain holds twins", i)
	case !twins && !s.Distinct() && short:
		bad("secondary slot %d: twin count odd, but its %d entries hold no twins", i, t.slots[i].Len())
	}
}
