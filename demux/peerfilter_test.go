package demux_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
)

// TestConnectedPeersChurn: a listener and n sockets connected on one
// address and port (the growing tables keep a filter of their peers, a
// list up to 64 and counts per bit past that), some pairs sharing a peer
// and so a filter bit; they reconnect and close in a random order. After
// every change, each connected socket still receives its peer's datagrams,
// a reconnected socket's old peer and unknown sources reach the listener,
// and Verify holds.
func TestConnectedPeersChurn(t *testing.T) {
	for _, n := range []int{8, 64, 65, 300} {
		for _, cfg := range discConfigs {
			t.Run(fmt.Sprintf("%d/%s", n, cfgName(cfg)), func(t *testing.T) {
				tab, err := demux.New[string](cfg)
				require.NoError(t, err)
				local := ad("10.0.0.1")
				o := demux.Options{Addr: local, Port: 53, ReuseAddr: true}
				_, err = tab.Bind(o, "listener")
				require.NoError(t, err)
				peer := func(i int) netip.AddrPort {
					// Pairs 2k and 2k+1 share their peer.
					return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i / 2 >> 8), byte(i / 2)}), 5000)
				}
				var socks []*demux.Socket[string]
				peers := map[*demux.Socket[string]]netip.AddrPort{}
				for i := range n {
					s, err := tab.Bind(o, fmt.Sprint(i))
					require.NoError(t, err)
					require.NoError(t, s.Connect(peer(i), local))
					socks = append(socks, s)
					peers[s] = peer(i)
				}
				check := func(step string) {
					require.NoError(t, tab.Verify(), step)
					for _, p := range peers {
						got, _ := tab.Lookup(p, netip.AddrPortFrom(local, 53), 1)
						require.NotNil(t, got, "%s: from %v", step, p)
						require.Equal(t, p, got.RemoteAddr(), "%s: from %v", step, p)
					}
					for j := range 20 {
						src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, 16, 0, byte(j)}), 7000)
						assert.Equal(t, "listener", receiver(tab, src.String(), "10.0.0.1:53", 1), step)
					}
				}
				check("built")
				r := rand.New(rand.NewPCG(uint64(n), 1))
				r.Shuffle(len(socks), func(i, j int) { socks[i], socks[j] = socks[j], socks[i] })
				for i, s := range socks {
					if i%3 == 0 {
						// Reconnect to a peer of its own; the old one, if no
						// other socket has it, falls to the listener.
						old := peers[s]
						p := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 169, byte(i >> 8), byte(i)}), 6000)
						require.NoError(t, s.Connect(p, local))
						peers[s] = p
						if !hasPeer(peers, old) {
							assert.Equal(t, "listener", receiver(tab, old.String(), "10.0.0.1:53", 1), "old peer %v", old)
						}
						check(fmt.Sprintf("reconnect %d", i))
					}
					require.NoError(t, s.Close())
					delete(peers, s)
					check(fmt.Sprintf("close %d", i))
				}
			})
		}
	}
}

func hasPeer(peers map[*demux.Socket[string]]netip.AddrPort, p netip.AddrPort) bool {
	for _, x := range peers {
		if x == p {
			return true
		}
	}
	return false
}
