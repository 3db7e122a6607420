package bind

import (
	"math"

	"github.com/udpdemux/udpdemux/hash1"
	"github.com/udpdemux/udpdemux/hash2"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// Conflicts reports whether binding n conflicts with e, a socket bound on
// the same port: not both ReuseAddr, compatible devices, overlapping
// addresses, and not both ReusePort with the same owner. Unlike Linux, a
// compatible ReusePort socket does not excuse conflicts with the others.
func Conflicts(n, e *lookup.Entry) bool {
	if n.Flags&e.Flags&lookup.ReuseAddr != 0 {
		return false
	}
	if n.Device != 0 && e.Device != 0 && n.Device != e.Device {
		return false
	}
	if !ipv6.Overlap(n, e) {
		return false
	}
	return n.Flags&e.Flags&lookup.ReusePort == 0 || n.Owner != e.Owner
}

// Rule is how explicit-port checks choose between the tables.
type Rule struct {
	// threshold: the secondary table is used when the primary chain holds
	// more than threshold sockets.
	threshold int
	// fallback: scan the primary chain instead when a secondary slot is
	// longer than it (the hybrid rule).
	fallback bool
}

// Rules for the three lookup strategies.
var (
	OnePhaseRule = Rule{threshold: math.MaxInt}
	TwoPhaseRule = Rule{threshold: -1}
)

// HybridRule is Linux 2.6.33's rule with the given threshold.
func HybridRule(threshold int) Rule { return Rule{threshold: threshold, fallback: true} }

// Checker runs explicit-port bind checks on a pair of tables.
type Checker struct {
	H1   *hash1.Table
	H2   *hash2.Table
	Rule Rule
}

// InUse reports whether a socket bound on n.Port conflicts with n, and
// whether the secondary table answered.
// The caller holds the primary slot lock of n.Port, which every writer of
// a socket on that port holds too, so the secondary slots can be read
// without their locks.
func (c *Checker) InUse(n *lookup.Entry) (inUse, secondary bool) {
	p := c.H1.Slot(n.Port)
	if !needsPrimary(n) && p.Chain.Len() > c.Rule.threshold {
		i := c.H2.IndexOf(n)
		w := c.H2.Index(c.H2.WildHash(), n.Port)
		exact, wild := c.H2.At(i), c.H2.At(w)
		limit := p.Chain.Len()
		if !c.Rule.fallback || (exact.Chain.Len() <= limit && wild.Chain.Len() <= limit) {
			if chainConflicts(exact.Chain.First(), lookup.OfSecondary, n) {
				return true, true
			}
			return i != w && chainConflicts(wild.Chain.First(), lookup.OfSecondary, n), true
		}
	}
	return chainConflicts(p.Chain.First(), lookup.OfPrimary, n), false
}

// needsPrimary reports whether sockets that conflict with n may sit outside
// n's exact and wildcard secondary slots: n is a wildcard, which overlaps
// every address, or IPv4 127.0.0.6, which dual-stack sockets connected to
// IPv6 peers hold without being hashed under it.
func needsPrimary(n *lookup.Entry) bool {
	return n.IsWild() || (!n.Has(lookup.Is6) && n.V4 == lookup.Placeholder4)
}

// chainConflicts reports whether an entry of the chain from x, other than
// a state of n's own socket, conflicts with n on n's port.
func chainConflicts(x *lookup.Node, of lookup.Link, n *lookup.Entry) bool {
	for ; x != nil; x = x.Next.Load() {
		if e := of(x); e.Port == n.Port && e.Ref.Sock != n.Ref.Sock && Conflicts(n, e) {
			return true
		}
	}
	return false
}
