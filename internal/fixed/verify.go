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
	seen1 := map[*lookup.Entry]bool{}
	groups := map[*lookup.Group]bool{}
	for i := range h1.Len() {
		c := &h1.At(i).Chain
		if c.First() == nil && c.Len() == 0 {
			continue
		}
		n := walk(c, lookup.OfPrimary, func(f string, a ...any) { bad("primary slot %d: "+f, append([]any{i}, a...)...) }, func(e *lookup.Entry) {
			if h1.Index(e.Port) != i {
				bad("primary slot %d holds port %d", i, e.Port)
			}
			if seen1[e] {
				bad("entry %v:%d twice in the primary table", e.LocalAddr(), e.Port)
			}
			seen1[e] = true
		})
		if n != c.Len() {
			bad("primary slot %d: count %d, chain %d", i, c.Len(), n)
		}
	}
	seen2 := map[*lookup.Entry]bool{}
	for i := range h2.Len() {
		s := h2.At(i)
		if s.Seq.Moving() {
			bad("secondary slot %d: move in progress", i)
		}
		h2.VerifySummary(i, bad)
		c := &s.Chain
		if c.First() == nil && c.Len() == 0 {
			continue
		}
		n := walk(c, lookup.OfSecondary, func(f string, a ...any) { bad("secondary slot %d: "+f, append([]any{i}, a...)...) }, func(e *lookup.Entry) {
			if h2.IndexOf(e) != i {
				bad("entry %v:%d in secondary slot %d, want %d", e.LocalAddr(), e.Port, i, h2.IndexOf(e))
			}
			if seen2[e] {
				bad("entry %v:%d twice in the secondary table", e.LocalAddr(), e.Port)
			}
			seen2[e] = true
		})
		if n != c.Len() {
			bad("secondary slot %d: count %d, chain %d", i, c.Len(), n)
		}
	}
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

// walk follows chain c, checking the back links, calls f for every entry
// and returns the chain's length.
func walk(c *lookup.Chain, of lookup.Link, bad func(string, ...any), f func(*lookup.Entry)) int {
	n := 0
	var prev *lookup.Node
	for x := c.First(); x != nil; x = x.Next.Load() {
		if x.Prev != prev {
			bad("broken back link")
		}
		f(of(x))
		prev = x
		n++
		if n > 1<<26 {
			bad("chain does not end")
			break
		}
	}
	return n
}
