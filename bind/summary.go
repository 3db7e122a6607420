package bind

import (
	"maps"
	"slices"

	"github.com/udpdemux/udpdemux/lookup"
)

// attrs is what decides whether a new socket conflicts with a bound one
// (Conflicts): reuse flags, family, addresses, device, owner.
type attrs struct {
	flags uint8 // ReuseAddr, ReusePort, Is6, V6Only
	kind  uint8 // in wild classes, which stand for the address
	dev   int32
	owner uint32
	v4    uint32
	v6    lookup.Addr16
}

const conflictFlags = lookup.ReuseAddr | lookup.ReusePort | lookup.Is6 | lookup.V6Only

func attrsOf(e *lookup.Entry) attrs {
	a := attrs{flags: e.Flags & conflictFlags, dev: e.Device, v4: e.V4, v6: e.V6}
	if e.Has(lookup.ReusePort) {
		a.owner = e.Owner
	}
	return a
}

// conflicts reports whether n conflicts with a socket of attributes a.
func (a *attrs) conflicts(n *lookup.Entry) bool {
	var e lookup.Entry
	e.Flags, e.Device, e.Owner, e.V4, e.V6 = a.flags, a.dev, a.owner, a.v4, a.v6
	return Conflicts(n, &e)
}

// class counts the bound sockets with one set of attributes.
type class struct {
	a attrs
	n int
}

// classes is a small set of classes, the first inline.
type classes struct {
	first class
	more  []class
}

func (cs *classes) add(a attrs, d int) {
	if cs.first.n > 0 && cs.first.a == a {
		cs.first.n += d
	} else if i := slices.IndexFunc(cs.more, func(c class) bool { return c.a == a }); i >= 0 {
		cs.more[i].n += d
		if cs.more[i].n == 0 {
			cs.more = append(cs.more[:i], cs.more[i+1:]...)
		}
	} else if cs.first.n == 0 {
		cs.first = class{a, d}
	} else {
		cs.more = append(cs.more, class{a, d})
	}
	if cs.first.n == 0 && len(cs.more) > 0 {
		cs.first, cs.more = cs.more[len(cs.more)-1], cs.more[:len(cs.more)-1]
	}
}

// Summary is what a port's bind checks read instead of its sockets, in
// the growing storage (package grow keeps one per port that has held more
// than a few sockets, under the port's lock). Its zero value counts no
// socket. Each
// socket bound to no device is counted in the classes of its IPv4 side
// (unless it is IPv6-only), of its IPv6 address (if it is an IPv6 socket
// that is not v4-mapped), and, with its address left out, in wild. Those
// bound to a device are counted in devs.
type Summary struct {
	byV4 keyed[uint32]
	byV6 keyed[lookup.Addr16]
	wild classes
	// devs counts the sockets bound to a device; nil while the port has
	// none, as most ports never do.
	devs *devSummaries
}

// devSummaries counts a port's sockets bound to a device, each twice with
// its device left out: in all, and in the summary of its device. Two
// sockets conflict only if one has no device or both have the same
// (Conflicts); so a bind to no device checks all, and a bind to a
// device checks that device's summary, and neither reads the classes of
// the other devices. Without this, sockets that differ only by device
// were as many classes of one key, and each bind checked them all: 100 000
// such binds took minutes.
type devSummaries struct {
	all Summary
	by  map[int32]*Summary
	// peak is the most devices by held since it was last made; see
	// keyed.peak.
	peak int
}

// keyed holds the classes of each address key. Nearly every key of a
// busy port holds one socket, and nearly all of those are of one class:
// those keys are in ones, a set of keys, and their class, common, is kept
// once. A key's first class otherwise sits in a cell, which leaves out the
// address its key gives (20 bytes where a class takes 40); a key's other
// classes, and a first one that a cell cannot hold, are kept whole in
// more. A key is in ones or in cells and more, never both. A summary of a
// million IPv4 addresses of one class takes about 20 bytes a socket this
// way; kept in cells it took about 56.
type keyed[K comparable] struct {
	ones   map[K]struct{}
	common cell // n unused; changes only while ones is empty
	cells  map[K]cell
	more   map[K][]class
	// peak is the most keys m has held since its maps were last made. A
	// Go map keeps the room of the most keys it held, so a port that
	// once held many sockets would keep their room for good; m makes its
	// maps again, at their size, once it holds a quarter of its peak.
	peak int
}

// compactMin is the peak below which a summary's maps are kept as they
// are: small maps are not worth making again.
const compactMin = 64

// keys returns how many keys m holds.
func (m *keyed[K]) keys() int { return len(m.ones) + len(m.cells) + len(m.more) }

// fit follows m's size after a change: it raises the peak, or makes the
// maps again at their size once they hold a quarter of it. Each rebuild
// copies at most a third of the keys removed since the last, so removals
// stay O(1) amortized.
func (m *keyed[K]) fit() {
	n := m.keys()
	m.peak = max(m.peak, n)
	if m.peak < compactMin || n > m.peak/4 {
		return
	}
	m.ones, m.cells, m.more = remade(m.ones), remade(m.cells), remade(m.more)
	m.peak = n
}

// remade returns a map of src's entries sized for them alone, or nil if
// src has none.
func remade[K comparable, V any](src map[K]V) map[K]V {
	if len(src) == 0 {
		return nil
	}
	out := make(map[K]V, len(src))
	for k, v := range src {
		out[k] = v
	}
	return out
}

// cell is a class without the address that its key gives.
type cell struct {
	flags uint8
	wild6 bool // under an IPv4 key: the IPv6 address is "::", not the key's mapped form
	dev   int32
	owner uint32
	v4    uint32 // under an IPv6 key: the IPv4 side
	n     int32
}

// cellOf4 returns a's cell under IPv4 key a.v4, if a cell can hold it:
// if its IPv6 address is the key's mapped form or "::".
func cellOf4(a attrs) (cell, bool) {
	c := cell{flags: a.flags, dev: a.dev, owner: a.owner, wild6: a.v6 == lookup.Wild6}
	return c, c.wild6 || a.v6 == lookup.Map4(a.v4)
}

func attrsOf4(k uint32, c cell) attrs {
	a := attrs{flags: c.flags, dev: c.dev, owner: c.owner, v4: k, v6: lookup.Map4(k)}
	if c.wild6 {
		a.v6 = lookup.Wild6
	}
	return a
}

// cellOf6 returns a's cell under IPv6 key a.v6: always one.
func cellOf6(a attrs) (cell, bool) {
	return cell{flags: a.flags, dev: a.dev, owner: a.owner, v4: a.v4}, true
}

func attrsOf6(k lookup.Addr16, c cell) attrs {
	return attrs{flags: c.flags, dev: c.dev, owner: c.owner, v4: c.v4, v6: k}
}

// add counts d sockets of attributes a under key k; fold makes a's cell.
func (m *keyed[K]) add(k K, a attrs, d int, fold func(attrs) (cell, bool)) {
	defer m.fit()
	c, ok := fold(a)
	if _, one := m.ones[k]; one {
		delete(m.ones, k)
		if d == -1 && ok && same(c, m.common) {
			return
		}
		// k gets a second socket, or a count ones cannot hold: its one
		// socket moves to a cell, and k is counted there.
		first := m.common
		first.n = 1
		put(&m.cells, k, first)
	} else if _, taken := m.cells[k]; d == 1 && ok && !taken && len(m.more[k]) == 0 {
		if len(m.ones) == 0 {
			m.common = c
		}
		if same(c, m.common) {
			put(&m.ones, k, struct{}{})
			return
		}
	}
	if have, taken := m.cells[k]; taken && ok && same(have, c) {
		have.n += int32(d)
		if have.n == 0 {
			delete(m.cells, k)
		} else {
			m.cells[k] = have
		}
		return
	}
	ms := m.more[k]
	for i := range ms {
		if ms[i].a == a {
			if ms[i].n += d; ms[i].n == 0 {
				ms = append(ms[:i:i], ms[i+1:]...)
				if len(ms) == 0 {
					delete(m.more, k)
				} else {
					m.more[k] = ms
				}
			}
			return
		}
	}
	if _, taken := m.cells[k]; ok && !taken {
		c.n = int32(d)
		put(&m.cells, k, c)
		return
	}
	put(&m.more, k, append(ms, class{a, d}))
}

// put sets (*m)[k] to v, making *m first if it is nil.
func put[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = map[K]V{}
	}
	(*m)[k] = v
}

// same reports whether a and b are one class (counts aside).
func same(a, b cell) bool {
	a.n, b.n = 0, 0
	return a == b
}

// conflict reports whether a class under key k conflicts with n; unfold
// makes a cell's class.
func (m *keyed[K]) conflict(k K, n *lookup.Entry, unfold func(K, cell) attrs) bool {
	if _, one := m.ones[k]; one {
		a := unfold(k, m.common)
		return a.conflicts(n)
	}
	if c, ok := m.cells[k]; ok {
		if a := unfold(k, c); a.conflicts(n) {
			return true
		}
	}
	return slices.ContainsFunc(m.more[k], func(c class) bool { return c.a.conflicts(n) })
}

// all returns every key's classes and their counts, for Verify.
func (m *keyed[K]) all(unfold func(K, cell) attrs) map[K]map[attrs]int {
	out := map[K]map[attrs]int{}
	at := func(k K) map[attrs]int {
		if out[k] == nil {
			out[k] = map[attrs]int{}
		}
		return out[k]
	}
	for k := range m.ones {
		at(k)[unfold(k, m.common)]++
	}
	for k, c := range m.cells {
		at(k)[unfold(k, c)] += int(c.n)
	}
	for k, cs := range m.more {
		for _, c := range cs {
			at(k)[c.a] += c.n
		}
	}
	return out
}

// empty reports whether m counts no socket.
func (m *keyed[K]) empty() bool { return len(m.ones) == 0 && len(m.cells) == 0 && len(m.more) == 0 }

// The kinds of address that stand for the address in the classes that
// wildcard binds read: v4-mapped (an IPv4 socket counts as mapped), the
// IPv6 wildcard, or another IPv6 address.
const (
	kindOther uint8 = iota
	kindMapped
	kindWild
)

func wildAttrs(e *lookup.Entry) attrs {
	a := attrsOf(e)
	a.v4, a.v6 = 0, lookup.Addr16{}
	switch {
	case !e.Has(lookup.Is6) || e.V6.IsMapped():
		a.kind = kindMapped
	case e.V6 == lookup.Wild6:
		a.kind = kindWild
	}
	return a
}

// wildConflicts reports whether n, a wildcard bind, conflicts with a
// socket of the wild class a: one stands in with an address of the class's
// kind, since a wildcard overlaps all addresses of a kind alike.
func wildConflicts(n *lookup.Entry, a attrs) bool {
	switch a.kind {
	case kindMapped:
		a.v4, a.v6 = 1, lookup.Map4(1)
	case kindWild:
		a.v6 = lookup.Wild6
	default:
		a.v6, a.v4 = lookup.Addr16{Hi: 0x20010db8 << 32}, 1 // a non-mapped IPv6 address
	}
	return a.conflicts(n)
}

// Add counts e in s (d = 1) or uncounts it (d = -1). What it does depends
// on e's attributes that decide a conflict alone (see SameClass).
func (s *Summary) Add(e *lookup.Entry, d int) {
	a, w := attrsOf(e), wildAttrs(e)
	if e.Device == 0 {
		s.count(e, a, w, d)
		return
	}
	a.dev, w.dev = 0, 0
	if s.devs == nil {
		s.devs = &devSummaries{by: map[int32]*Summary{}}
	}
	ds := s.devs
	ds.all.count(e, a, w, d)
	one := ds.by[e.Device]
	if one == nil {
		one = new(Summary)
		ds.by[e.Device] = one
	}
	one.count(e, a, w, d)
	if one.empty() {
		delete(ds.by, e.Device)
	}
	switch n := len(ds.by); {
	case n == 0:
		s.devs = nil
	case n > ds.peak:
		ds.peak = n
	case ds.peak >= compactMin && n <= ds.peak/4:
		ds.by, ds.peak = remade(ds.by), n
	}
}

// count counts a socket e of attributes a and wild attributes w in s.
func (s *Summary) count(e *lookup.Entry, a, w attrs, d int) {
	if !e.Has(lookup.Is6 | lookup.V6Only) {
		s.byV4.add(e.V4, a, d, cellOf4)
	}
	if e.Has(lookup.Is6) && !e.V6.IsMapped() {
		s.byV6.add(e.V6, a, d, cellOf6)
	}
	s.wild.add(w, d)
}

// empty reports whether s counts no socket.
func (s *Summary) empty() bool {
	return s.byV4.empty() && s.byV6.empty() && s.wild.first.n == 0 && s.devs == nil
}

// InUse reports whether a socket counted in s conflicts with n, a socket
// being bound on the same port: what Conflicts against each of them
// would answer.
func (s *Summary) InUse(n *lookup.Entry) bool {
	if s.conflicts(n) {
		return true
	}
	switch {
	case s.devs == nil:
		return false
	case n.Device == 0:
		return s.devs.all.conflicts(n)
	}
	one := s.devs.by[n.Device]
	return one != nil && one.conflicts(n)
}

// conflicts is InUse for the sockets that s counts itself, not in devs.
func (s *Summary) conflicts(n *lookup.Entry) bool {
	if n.IsWild() {
		// A wildcard overlaps every address of the kinds it reaches.
		if s.wild.first.n > 0 && wildConflicts(n, s.wild.first.a) {
			return true
		}
		return slices.ContainsFunc(s.wild.more, func(c class) bool { return wildConflicts(n, c.a) })
	}
	return s.byV4.conflict(n.V4, n, attrsOf4) || s.byV4.conflict(0, n, attrsOf4) ||
		s.byV6.conflict(n.V6, n, attrsOf6) || s.byV6.conflict(lookup.Wild6, n, attrsOf6)
}

// SameClass reports whether a and b have the same attributes that decide a
// conflict, so that a summary counts one as it counts the other: a socket
// whose move keeps them (most connects: the local address stays) needs no
// update of its port's summary.
func SameClass(a, b *lookup.Entry) bool { return attrsOf(a) == attrsOf(b) }

// Equal reports whether a and b count the same sockets' classes, whatever
// form each keeps them in: for a Verify that rebuilds a port's summary from
// its sockets.
func (s *Summary) Equal(b *Summary) bool {
	if !sameClasses(&s.wild, &b.wild) ||
		!maps.EqualFunc(s.byV4.all(attrsOf4), b.byV4.all(attrsOf4), maps.Equal) ||
		!maps.EqualFunc(s.byV6.all(attrsOf6), b.byV6.all(attrsOf6), maps.Equal) {
		return false
	}
	if s.devs == nil || b.devs == nil {
		return s.devs == b.devs
	}
	return s.devs.all.Equal(&b.devs.all) && maps.EqualFunc(s.devs.by, b.devs.by, (*Summary).Equal)
}

// sameClasses reports whether a and b hold the same classes and counts.
func sameClasses(a, b *classes) bool {
	count := func(cs *classes) map[attrs]int {
		m := map[attrs]int{}
		if cs.first.n > 0 {
			m[cs.first.a] += cs.first.n
		}
		for _, c := range cs.more {
			m[c.a] += c.n
		}
		return m
	}
	return maps.Equal(count(a), count(b))
}
