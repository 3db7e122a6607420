package fixed

import (
	"fmt"

	"github.com/udpdemux/udpdemux/lookup"
)

// Verify checks the tables' invariants, calling bad for each violation,
// and returns the entries they hold: each entry is in exactly the primary
// slot of its port and the secondary slot of its address key, once, and is
// its open socket's current state; each slot's count equals its chain's
// length, its links are consistent and no move is in progress; each
// secondary slot's summary (key mask, twin count) fits its chain;
// SO_REUSEPORT groups hold exactly their unconnected ReusePort members.
// Call it when no write is in flight.
func (x *Engine) Verify(bad func(format string, args ...any)) map[*lookup.Entry]bool {
	h1, h2 := x.h1, x.h2
	for i := range h2.Len() {
		if h2.At(i).Seq.Moving() {
			bad("secondary slot %d: move in progress", i)
		}
		h2.VerifySummary(i, bad)
	}
	seen1 := verifySlots("primary", h1.Len(), func(i int) *lookup.Chain { return &h1.At(i).Chain }, lookup.OfPrimary,
		func(e *lookup.Entry) int { return h1.Index(e.Port) }, bad)
	seen2 := verifySlots("secondary", h2.Len(), func(i int) *lookup.Chain { return &h2.At(i).Chain }, lookup.OfSecondary,
		h2.IndexOf, bad)
	groups := map[*lookup.Group]bool{}
	if len(seen1) != len(seen2) {
		bad("%d entries in the primary table, %d in the secondary", len(seen1), len(seen2))
	}
	for e := range seen1 {
		if !seen2[e] {
			bad("entry %v:%d in the primary table only", e.LocalAddr(), e.Port)
		}
		if e.Sock().Closed.Load() || e.Sock().Cur.Load() != e {
			bad("entry %v:%d is not its socket's current state", e.LocalAddr(), e.Port)
		}
		wantGroup := e.Has(lookup.ReusePort) && !e.Has(lookup.Connected)
		if (e.Group != nil) != wantGroup {
			bad("entry %v:%d: group %v, want one: %v", e.LocalAddr(), e.Port, e.Group != nil, wantGroup)
		}
		if e.Group != nil {
			if !groups[e.Group] {
				groups[e.Group] = true
				e.Group.Verify(fmt.Sprintf("group of %v:%d", e.LocalAddr(), e.Port), bad)
			}
			in := false
			for _, m := range e.Group.Members() {
				in = in || m == e
				if !seen1[m] {
					bad("group of %v:%d holds a socket that is not bound", e.LocalAddr(), e.Port)
				} else if m.Port != e.Port || m.V4 != e.V4 || m.V6 != e.V6 || m.Device != e.Device || m.Owner != e.Owner {
					bad("group of %v:%d holds %v:%d, which differs", e.LocalAddr(), e.Port, m.LocalAddr(), m.Port)
				}
			}
			if !in {
				bad("entry %v:%d is not in its group", e.LocalAddr(), e.Port)
			}
		}
	}
	for e := range seen2 {
		if !seen1[e] {
			bad("entry %v:%d in the secondary table only", e.LocalAddr(), e.Port)
		}
	}
	return seen1
}

// verifySlots checks the chains of a table, named name, of n slots, whose
// slot i's chain is chain(i), linked through of: each chain's back links,
// its end and its count, and that each entry is in the slot home gives,
// once. It returns the entries the chains hold.
func verifySlots(name string, n int, chain func(int) *lookup.Chain, of lookup.Link, home func(*lookup.Entry) int,
	bad func(format string, args ...any)) map[*lookup.Entry]bool {
	seen := map[*lookup.Entry]bool{}
	for i := range n {
		c := chain(i)
		k := 0
		var prev *lookup.Node
		for x := c.First(); x != nil; x = x.Next.Load() {
			if x.Prev != prev {
				bad("%s slot %d: broken back link", name, i)
			}
			e := of(x)
			if h := home(e); h != i {
				bad("entry %v:%d in %s slot %d, want %d", e.LocalAddr(), e.Port, name, i, h)
			}
			if seen[e] {
				bad("entry %v:%d twice in the %s table", e.LocalAddr(), e.Port, name)
			}
			seen[e] = true
			prev = x
			if k++; k > 1<<26 {
				bad("%s slot %d: chain does not end", name, i)
				break
			}
		}
		if k != c.Len() {
			bad("%s slot %d: count %d, chain %d", name, i, c.Len(), k)
		}
	}
	return seen
}
