package serve

import (
	"hash/maphash"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeerRoutesSharedSet: peers whose hashes fall in one set of a
// wildcard Conn's peer routes do not forget each other, up to four; a
// fifth forgets the one learned longest ago, and learning a peer again
// makes it the newest. With one slot per hash, the second of two such
// peers made the first's answer leave from the address routing chose.
func TestPeerRoutesSharedSet(t *testing.T) {
	r := &peerRoutes{seed: maphash.MakeSeed()}
	// Six peers in one set, found by their hash.
	var peers []netip.AddrPort
	want := r.set(netip.MustParseAddrPort("127.0.0.1:1"))
	for port := uint16(2); len(peers) < 6; port++ {
		require.NotZero(t, port, "no six peers share a set")
		if p := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port); r.set(p) == want {
			peers = append(peers, p)
		}
	}
	local := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)}) }
	for _, tc := range []struct {
		name   string
		learn  []int // indexes into peers, in order
		known  []int
		forgot []int
	}{
		{"two", []int{0, 1}, []int{0, 1}, nil},
		{"four", []int{0, 1, 2, 3}, []int{0, 1, 2, 3}, nil},
		{"five forget the first", []int{0, 1, 2, 3, 4}, []int{1, 2, 3, 4}, []int{0}},
		{"learned again stays", []int{0, 1, 2, 3, 0, 4}, []int{0, 2, 3, 4}, []int{1}},
		{"six forget the first two", []int{0, 1, 2, 3, 4, 5}, []int{2, 3, 4, 5}, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.sets = [len(r.sets)][4]peerRoute{}
			for _, i := range tc.learn {
				r.learn(peers[i], local(i), 7)
			}
			for _, i := range tc.known {
				a, ifindex := r.lookup(peers[i])
				assert.Equal(t, local(i), a, "peer %d", i)
				assert.Equal(t, 7, ifindex, "peer %d", i)
			}
			for _, i := range tc.forgot {
				a, _ := r.lookup(peers[i])
				assert.False(t, a.IsValid(), "peer %d is still known", i)
			}
		})
	}
}
