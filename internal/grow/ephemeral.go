package grow

import (
	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/internal/sock"
)

// Ephemeral chooses a port for n and returns its record locked, with
// n.Port set, or nil if no port of the range is free for n: bind.Choose
// over the engine's occupancy index and random source, each port checked
// as InUse checks it.
func (g *Engine) Ephemeral(n *sock.Entry) *Port {
	pr, ok := bind.Choose(g.occ, g.rand, n, g.LockPort, g.Unlock, func(pr *Port, n *sock.Entry) bool {
		inUse, _ := g.InUse(pr, n)
		return !inUse
	})
	if !ok {
		return nil
	}
	return pr
}
