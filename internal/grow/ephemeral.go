package grow

import (
	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// Ephemeral chooses a port for n and returns its record locked, with
// n.Port set, or nil if no port of the range is free for n: bind.Choose
// over the engine's occupancy index and random source, each port checked
// as InUse checks it. One Guard checks the whole search: its draws, and
// each port it locks and declines.
func (g *Engine) Ephemeral(n *lookup.Entry) *Port {
	o := lockorder.Begin()
	lock := func(p uint16) *Port { return g.lockPort(p, o) }
	pr, ok := bind.Choose(g.occ, g.rand, o, n, lock, g.release, func(pr *Port, n *lookup.Entry) bool {
		inUse, _ := g.InUse(pr, n)
		return !inUse
	})
	if !ok {
		o.End()
		return nil
	}
	return pr
}
