package grow

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/internal/sock"
)

// randomEntry returns an entry with attributes drawn from small sets, so
// that classes repeat and every kind of address, flag and device meets
// every other.
func randomEntry(r *rand.Rand) *sock.Entry {
	e := &sock.Entry{Face: sock.Face{Port: 53, Device: int32(r.IntN(3)), Ref: sock.Ref{Sock: new(sock.Socket)}}, Owner: uint32(r.IntN(2))}
	if r.IntN(2) == 0 {
		e.Flags |= sock.ReuseAddr
	}
	if r.IntN(2) == 0 {
		e.Flags |= sock.ReusePort
	}
	v4s := []uint32{0, 10<<24 | 1, 10<<24 | 2, 127<<24 | 6}
	v6s := []sock.Addr16{{}, {Hi: 0x20010db8 << 32, Lo: 1}, {Hi: 0x20010db8 << 32, Lo: 2}}
	switch r.IntN(5) {
	case 0: // IPv4
		e.V4 = v4s[r.IntN(len(v4s))]
		e.V6 = sock.Map4(e.V4)
		e.Flags |= sock.HasV4
	case 1: // IPv6, v4-mapped
		e.V4 = v4s[r.IntN(len(v4s))]
		e.V6 = sock.Map4(e.V4)
		e.Flags |= sock.Is6 | sock.HasV4
	case 2: // "::", dual-stack or IPv6-only
		e.Flags |= sock.Is6 | sock.HasV6
		if r.IntN(2) == 0 {
			e.Flags |= sock.V6Only
		} else {
			e.Flags |= sock.HasV4
		}
	case 3: // specific IPv6: IPv6-only, the placeholder as its IPv4 side
		e.V6 = v6s[1+r.IntN(2)]
		e.V4 = 127<<24 | 6
		e.Flags |= sock.Is6 | sock.HasV6 | sock.V6Only
	default: // dual-stack connected to an IPv6 peer: holds the placeholder
		e.V6 = v6s[1+r.IntN(2)]
		e.V4 = 127<<24 | 6
		e.Flags |= sock.Is6 | sock.HasV6 | sock.Connected
	}
	return e
}

// TestSummaryMatchesScan: the summary's answer for every new socket is the
// answer of a scan of every bound socket with bind.Conflicts. Small
// populations, so that the answer often hangs on one class; sockets are
// added and removed at random.
func TestSummaryMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for round := range 3000 {
		var s summary
		var bound []*sock.Entry
		for step := range 12 {
			if len(bound) > 0 && r.IntN(3) == 0 {
				i := r.IntN(len(bound))
				s.add(bound[i], -1)
				bound = append(bound[:i], bound[i+1:]...)
			} else if len(bound) < 6 {
				e := randomEntry(r)
				s.add(e, 1)
				bound = append(bound, e)
			}
			for range 8 {
				n := randomEntry(r)
				want := false
				for _, e := range bound {
					want = want || bind.Conflicts(n, e)
				}
				require.Equal(t, want, s.inUse(n), "round %d step %d: new %+v among %d", round, step, n.Face, len(bound))
			}
		}
		for _, e := range bound {
			s.add(e, -1)
		}
		require.Empty(t, s.byV4)
		require.Empty(t, s.byV6)
		require.Zero(t, s.wild.first.n)
		require.Empty(t, s.wild.more)
	}
}
