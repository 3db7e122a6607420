package demux_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestConnectedPeersChurn: a listener and n sockets connected on one
// address and port (the growing tables keep a filter of their peers, a
// list up to 64 and counts per bit past that, which grows fourfold past
// 128 peers and shrinks back below 32), some pairs
// sharing a peer and so a filter bit; they reconnect and close in a
// random order. After
// every change, each connected socket still receives its peer's datagrams,
// a reconnected socket's old peer and unknown sources reach the listener,
// and Verify holds.
//
// Its subject is the growing tables' filter, and a Verify after every
// change and a check of every peer make a fixed-slot run with 300 peers
// take 5 s under the race detector: of demuxtest's list it takes each
// strategy with its defaults.
func TestConnectedPeersChurn(t *testing.T) {
	for _, n := range []int{8, 64, 65, 300} {
		for _, c := range demuxtest.Strategies() {
			cfg := c.Table
			t.Run(fmt.Sprintf("%d/%s", n, c.Name), func(t *testing.T) {
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

// TestPeerFilterResizeUnderLookups: the growing tables resize a port's
// peer filter as its connected sockets come and go, and publish the new
// filter whole. Readers look up 200 connected sockets that stay, while a
// writer connects 3 000 more on the same address and port and closes
// them, round after round, so that the filter grows from 2 048 bits to
// 32 768 and shrinks back each round. Every lookup must find its socket:
// one that reads a filter published before its bits were all set skips
// the 4-tuple index and gets the listener. The fixed slots have no
// filter, but the same lookups must find their sockets there too.
func TestPeerFilterResizeUnderLookups(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		t.Run(st.Name, func(t *testing.T) { peerFilterResizeUnderLookups(t, st.Table) })
	}
}

func peerFilterResizeUnderLookups(t *testing.T, cfg demux.Config) {
	// 3 000 sockets take the growing tables' filter through its sizes.
	// The fixed slots have no filter, and each bind there scans every
	// socket of the port: a few hundred are as good a test there.
	const stable = 200
	extra := 3000
	if cfg.Slots != 0 {
		extra = 500
	}
	tab, err := demux.New[int](cfg)
	require.NoError(t, err)
	local := ad("10.0.0.1")
	o := demux.Options{Addr: local, Port: 53, ReuseAddr: true}
	_, err = tab.Bind(o, -1)
	require.NoError(t, err)
	peer := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}), 5000)
	}
	for i := range stable {
		s, err := tab.Bind(o, i)
		require.NoError(t, err)
		require.NoError(t, s.Connect(peer(i), local))
	}
	dst := netip.AddrPortFrom(local, 53)
	var rounds, lookups, missed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		socks := make([]*demux.Socket[int], 0, extra)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i := range extra {
				s, err := tab.Bind(o, stable+i)
				if err == nil {
					err = s.Connect(peer(stable+i), local)
				}
				if !assert.NoError(t, err) {
					return
				}
				socks = append(socks, s)
			}
			for _, s := range socks {
				if !assert.NoError(t, s.Close()) {
					return
				}
			}
			socks = socks[:0]
			rounds.Add(1)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(5, 6))
		for {
			select {
			case <-stop:
				return
			default:
			}
			i := r.IntN(stable)
			if _, v := tab.Lookup(peer(i), dst, 1); v != i {
				missed.Add(1)
			}
			lookups.Add(1)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for rounds.Load() < 4 && time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d rounds, %d lookups", rounds.Load(), lookups.Load())
	require.GreaterOrEqual(t, rounds.Load(), int64(4), "the writer did not finish its rounds")
	assert.Zero(t, missed.Load(), "lookups that missed a socket that stayed")
	assert.Positive(t, lookups.Load())
	require.NoError(t, tab.Verify())
}
