package ipv6

import "github.com/udpdemux/udpdemux/lookup"

// Overlap reports whether a new socket n and a bound socket e have
// overlapping local addresses, as Linux's inet_rcv_saddr_equal decides
// with wildcards matching on both sides (DESIGN.md rows 12-17 and 23-26). It is not symmetric: n is the
// socket being bound.
func Overlap(n, e *lookup.Entry) bool {
	if !n.Has(lookup.Is6) {
		if e.Has(lookup.Is6 | lookup.V6Only) {
			return false
		}
		return n.V4 == e.V4 || n.V4 == 0 || e.V4 == 0
	}
	nk, ek := kind(n), kind(e)
	switch {
	case nk == mapped && ek == mapped:
		if e.Has(lookup.V6Only) {
			return false
		}
		return n.V4 == e.V4 || n.V4 == 0 || e.V4 == 0
	case ek == wildAddr && !(e.Has(lookup.V6Only) && nk == mapped):
		return true
	case nk == wildAddr && !(n.Has(lookup.V6Only) && ek == mapped):
		return true
	}
	return e.Has(lookup.Is6) && n.V6 == e.V6
}

type addrKind uint8

const (
	other addrKind = iota
	wildAddr
	mapped
)

// kind classifies the IPv6 local address of e; an IPv4 socket counts as
// mapped.
func kind(e *lookup.Entry) addrKind {
	switch {
	case !e.Has(lookup.Is6) || e.V6.IsMapped():
		return mapped
	case e.V6 == lookup.Wild6:
		return wildAddr
	}
	return other
}
