package grow

import "github.com/udpdemux/udpdemux/internal/sock"

// Ephemeral chooses a port for n and returns its record locked, with
// n.Port set, or nil if no port of the range is free for n. It draws from
// the engine's occupancy index and random source.
//
// Like the fixed tables' default (bind.Ephemeral.Index), it picks
// uniformly among the ports that hold no socket (Occupancy.TakeFree) and
// fails at once when every port holds a socket that blocks n. When every
// port is used but some may be shared, it tries the ports of the range
// from a random one by a random step prime to the range's size, checking
// each against its port's summary: O(range), as Linux's search is when the
// range is nearly full.
func (g *Engine) Ephemeral(n *sock.Entry) *Port {
	var pr *Port
	took, search := g.occ.TakeFree(g.rand, n, func(p uint16) bool {
		pr = g.LockPort(p)
		if !g.occ.InUse(p) { // exact under p's lock, which every writer of p holds
			n.Port = p
			return true
		}
		g.Unlock(pr)
		return false
	})
	switch {
	case took:
		return pr
	case !search:
		return nil
	}
	r := g.occ.Range
	remaining := int(r.High-r.Low) + 1
	start := g.rand.IntN(remaining)
	step := 1 + g.rand.IntN(remaining)
	for gcd(step, remaining) != 1 {
		step++ // a step prime to the range's size visits every port once
	}
	for i := range remaining {
		p := r.Low + uint16((start+i*step)%remaining)
		if !r.Allowed(p) {
			continue
		}
		pr := g.LockPort(p)
		n.Port = p
		if inUse, _ := g.InUse(pr, n); !inUse {
			return pr
		}
		g.Unlock(pr)
	}
	return nil
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
