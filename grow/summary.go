package grow

import (
	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/internal/sock"
)

// attrs is what decides whether a new socket conflicts with a bound one
// (bind.Conflicts): reuse flags, family, addresses, device, owner.
type attrs struct {
	flags uint8 // ReuseAddr, ReusePort, Is6, V6Only
	kind  uint8 // in wild classes, which stand for the address
	dev   int32
	owner uint32
	v4    uint32
	v6    sock.Addr16
}

const conflictFlags = sock.ReuseAddr | sock.ReusePort | sock.Is6 | sock.V6Only

func attrsOf(e *sock.Entry) attrs {
	a := attrs{flags: e.Flags & conflictFlags, dev: e.Device, v4: e.V4, v6: e.V6}
	if e.Has(sock.ReusePort) {
		a.owner = e.Owner
	}
	return a
}

// conflicts reports whether n conflicts with a socket of attributes a.
func (a *attrs) conflicts(n *sock.Entry) bool {
	var e sock.Entry
	e.Flags, e.Device, e.Owner, e.V4, e.V6 = a.flags, a.dev, a.owner, a.v4, a.v6
	return bind.Conflicts(n, &e)
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

func (cs *classes) add(a attrs, d int) (empty bool) {
	if cs.first.n > 0 && cs.first.a == a {
		cs.first.n += d
	} else if i := cs.index(a); i >= 0 {
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
	return cs.first.n == 0
}

func (cs *classes) index(a attrs) int {
	for i := range cs.more {
		if cs.more[i].a == a {
			return i
		}
	}
	return -1
}

// conflict reports whether a class of cs conflicts with n.
func (cs *classes) conflict(n *sock.Entry) bool {
	if cs.first.n > 0 && cs.first.a.conflicts(n) {
		return true
	}
	for i := range cs.more {
		if cs.more[i].a.conflicts(n) {
			return true
		}
	}
	return false
}

// summary is what a port's bind checks read instead of its sockets. Each
// socket is counted in the classes of its IPv4 side (unless it is
// IPv6-only), of its IPv6 address (if it is an IPv6 socket that is not
// v4-mapped), and, with its address left out, in wild.
type summary struct {
	byV4 map[uint32]classes
	byV6 map[sock.Addr16]classes
	wild classes
}

// The kinds of address that stand for the address in the classes that
// wildcard binds read: v4-mapped (an IPv4 socket counts as mapped), the
// IPv6 wildcard, or another IPv6 address.
const (
	kindOther uint8 = iota
	kindMapped
	kindWild
)

func wildAttrs(e *sock.Entry) attrs {
	a := attrsOf(e)
	a.v4, a.v6 = 0, sock.Addr16{}
	switch {
	case !e.Has(sock.Is6) || e.V6.IsMapped():
		a.kind = kindMapped
	case e.V6 == sock.Wild6:
		a.kind = kindWild
	}
	return a
}

// wildConflicts reports whether n, a wildcard bind, conflicts with a
// socket of the wild class a: one stands in with an address of the class's
// kind, since a wildcard overlaps all addresses of a kind alike.
func wildConflicts(n *sock.Entry, a attrs) bool {
	var e sock.Entry
	e.Flags, e.Device, e.Owner = a.flags, a.dev, a.owner
	switch a.kind {
	case kindMapped:
		e.V4, e.V6 = 1, sock.Map4(1)
	case kindWild:
		e.V6 = sock.Wild6
	default:
		e.V6, e.V4 = sock.Addr16{Hi: 0x20010db8 << 32}, 1 // a non-mapped IPv6 address
	}
	return bind.Conflicts(n, &e)
}

func (s *summary) add(e *sock.Entry, d int) {
	a := attrsOf(e)
	if !e.Has(sock.Is6 | sock.V6Only) {
		if s.byV4 == nil {
			s.byV4 = map[uint32]classes{}
		}
		cs := s.byV4[e.V4]
		if cs.add(a, d) {
			delete(s.byV4, e.V4)
		} else {
			s.byV4[e.V4] = cs
		}
	}
	if e.Has(sock.Is6) && !e.V6.IsMapped() {
		if s.byV6 == nil {
			s.byV6 = map[sock.Addr16]classes{}
		}
		cs := s.byV6[e.V6]
		if cs.add(a, d) {
			delete(s.byV6, e.V6)
		} else {
			s.byV6[e.V6] = cs
		}
	}
	s.wild.add(wildAttrs(e), d)
}

// inUse reports whether a socket counted in s conflicts with n, a socket
// being bound on the same port.
func (s *summary) inUse(n *sock.Entry) bool {
	if n.IsWild() {
		// A wildcard overlaps every address of the kinds it reaches.
		if s.wild.first.n > 0 && wildConflicts(n, s.wild.first.a) {
			return true
		}
		for _, c := range s.wild.more {
			if wildConflicts(n, c.a) {
				return true
			}
		}
		return false
	}
	for _, cs := range [...]classes{s.byV4[n.V4], s.byV4[0], s.byV6[n.V6], s.byV6[sock.Wild6]} {
		if cs.conflict(n) {
			return true
		}
	}
	return false
}
