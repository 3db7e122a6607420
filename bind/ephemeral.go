package bind

import (
	"math/bits"

	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// Ephemeral chooses ports for bind(0).
//
// Each algorithm returns with g holding the primary slot lock of the port
// it chose, after setting n.Port, so that the caller links n before any
// other bind can take the port; or it returns false holding nothing.
type Ephemeral struct {
	Checker
	Occ  *Occupancy // with the range bind(0) chooses from, Occ.Range
	Rand *Rand
}

// Index picks uniformly among the ports of the range that no socket uses
// (Occupancy.takeFree). With none, it fails at once if every port holds a
// socket that blocks n, and otherwise searches the ports that may be
// shared with Bitmap.
func (x *Ephemeral) Index(n *lookup.Entry, g *lockorder.Guard) bool {
	took, search := x.Occ.takeFree(x.Rand, g, n, func(p uint16) { x.H1.LockPort(g, p) }, g.Unlock)
	if took || !search {
		return took
	}
	return x.Bitmap(n, g)
}

// Bitmap is Linux's search (udp_lib_get_port since 2.6.30): from a random
// chain, scan each primary chain once, marking in a bitmap the ports of that
// chain held by sockets that conflict with n, then walk the chain's ports
// from a random one by an odd multiple of the table size — which visits
// every port of the chain once in 16-bit arithmetic — and take the first
// that is in range, unreserved and unmarked.
func (x *Ephemeral) Bitmap(n *lookup.Entry, g *lockorder.Guard) bool {
	slots := x.H1.Len()
	shift := uint(bits.TrailingZeros(uint(slots)))
	remaining := uint64(x.Occ.Range.High-x.Occ.Range.Low) + 1
	r := x.Rand.rand32(g)
	first := uint16(uint64(r)*remaining>>32) + x.Occ.Range.Low
	step := uint16((r | 1) * uint32(slots))
	var marked [65536 / lookup.MinSlots / 64]uint64 // one bit per port of a chain
	for i := 0; i < slots; i++ {
		start := first + uint16(i)
		slot := x.H1.Slot(start)
		x.H1.LockPort(g, start)
		marked = [len(marked)]uint64{}
		for nd := slot.Chain.First(); nd != nil; nd = nd.Next.Load() {
			if e := lookup.OfPrimary(nd); Conflicts(n, e) {
				k := e.Port >> shift
				marked[k>>6] |= 1 << (k & 63)
			}
		}
		p := start
		for {
			k := p >> shift
			if x.Occ.Range.allowed(p) && marked[k>>6]&(1<<(k&63)) == 0 {
				n.Port = p
				return true
			}
			p += step
			if p == start {
				break
			}
		}
		g.Unlock()
	}
	return false
}

// Linear is the search before the 2009 fix: from a random port, probe port
// after port by a random odd step, rescanning the port's chain for each.
// It is kept for benchmarks.
func (x *Ephemeral) Linear(n *lookup.Entry, g *lockorder.Guard) bool {
	remaining := uint32(x.Occ.Range.High-x.Occ.Range.Low) + 1
	r := x.Rand.rand32(g)
	p := x.Occ.Range.Low + uint16(r%remaining)
	first, step := p, uint16(r|1)
	for {
		slot := x.H1.Slot(p)
		x.H1.LockPort(g, p)
		n.Port = p
		if x.Occ.Range.allowed(p) && !chainConflicts(slot.Chain.First(), lookup.OfPrimary, n) {
			return true
		}
		g.Unlock()
		for {
			p += step
			if p >= x.Occ.Range.Low && p <= x.Occ.Range.High {
				break
			}
		}
		if p == first {
			return false
		}
	}
}

// Choose is bind(0) for a storage that locks and checks a port its own
// way (package grow's): lock returns port p locked, unlock releases it,
// and free reports whether n may bind to the locked port; g is the
// write's Guard, through which its draws take the random source's lock. It
// returns the chosen port locked, with n.Port set, and true; or false,
// holding nothing.
//
// Like Index, it picks uniformly among the ports that hold no socket
// (Occupancy.takeFree) and fails at once when every port holds a socket
// that blocks n. When every port is used but some may be shared, it tries
// the ports of the range from a random one by a random step prime to the
// range's size, which visits each once, checking each with free: O(range),
// as Linux's search is when the range is nearly full.
func Choose[P any](o *Occupancy, rnd *Rand, g *lockorder.Guard, n *lookup.Entry, lock func(p uint16) P, unlock func(P), free func(P, *lookup.Entry) bool) (P, bool) {
	var held P
	took, search := o.takeFree(rnd, g, n, func(p uint16) { held = lock(p) }, func() { unlock(held) })
	if took || !search {
		return held, took
	}
	r := o.Range
	remaining := int(r.High-r.Low) + 1
	start := rnd.IntN(g, remaining)
	step := 1 + rnd.IntN(g, remaining)
	for gcd(step, remaining) != 1 {
		step++
	}
	for i := range remaining {
		p := r.Low + uint16((start+i*step)%remaining)
		if !r.allowed(p) {
			continue
		}
		held = lock(p)
		n.Port = p
		if free(held, n) {
			return held, true
		}
		unlock(held)
	}
	return held, false
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
