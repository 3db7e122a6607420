package demux_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestSharedTuple holds sockets that share a 4-tuple, where the newest
// first connect wins whatever the order of the binds, so that a scan of
// the port that stopped at its first 4-tuple match would answer wrongly.
// The sockets are bound so that the loser comes first on the port's
// chain.
func TestSharedTuple(t *testing.T) {
	const local, peer, other = "10.0.0.1:5300", "192.0.2.1:53", "192.0.2.2:53"
	type env struct {
		t    *testing.T
		tab  *demux.Table[string]
		a, b *demux.Socket[string]
	}
	connect := func(e env, s *demux.Socket[string], to string) {
		require.NoError(e.t, s.Connect(ap(to), ad("10.0.0.1")))
	}
	// both connects a, then b, to peer: b's first connect is the later.
	both := func(e env) {
		connect(e, e.a, peer)
		connect(e, e.b, peer)
	}
	cases := []struct {
		name string
		run  func(e env) // a and b are bound, b first
		want string      // receiver of peer → local after run
	}{
		{"the later first connect wins", func(e env) {
			both(e)
		}, "B"},
		{"the earlier first connect loses after a reconnect", func(e env) {
			both(e)
			connect(e, e.a, other)
			connect(e, e.a, peer)
		}, "B"},
		{"the winner's close leaves the other", func(e env) {
			both(e)
			require.NoError(e.t, e.b.Close())
		}, "A"},
		{"the loser's close leaves the winner", func(e env) {
			both(e)
			require.NoError(e.t, e.a.Close())
		}, "B"},
		{"the winner's disconnect leaves the other", func(e env) {
			both(e)
			require.NoError(e.t, e.b.Disconnect())
		}, "A"},
		{"a move to another peer unshares", func(e env) {
			connect(e, e.b, peer)
			connect(e, e.a, peer)
			connect(e, e.a, other)
		}, "B"},
	}
	for _, conf := range demuxtest.Configs() {
		cfg := conf.Table
		for _, c := range cases {
			t.Run(conf.Name+"/"+c.name, func(t *testing.T) {
				tab, err := demux.New[string](cfg)
				require.NoError(t, err)
				o := demux.Options{Addr: ad("10.0.0.1"), Port: 5300, ReuseAddr: true}
				b, err := tab.Bind(o, "B")
				require.NoError(t, err)
				a, err := tab.Bind(o, "A")
				require.NoError(t, err)
				c.run(env{t, tab, a, b})
				assert.Equal(t, c.want, receiver(tab, peer, local, 1))
				require.NoError(t, tab.Verify())
				// Closing every socket leaves nothing marked (a case
				// may have closed one already).
				_, _ = a.Close(), b.Close()
				assert.Equal(t, "", receiver(tab, peer, local, 1))
				require.NoError(t, tab.Verify())
			})
		}
	}
}

// TestSharedTupleRace looks up a datagram whose receiver stays put while
// another socket of its 4-tuple, ahead of it on the port's chain and
// beaten by it, moves to another peer and back. A scan that stopped at
// the mover's 4-tuple match while the port's chain said that no 4-tuple
// is shared (because the mark was cleared before the mover's old state
// left the chain, or set after its new one joined) would return the
// mover; every lookup must return the receiver.
func TestSharedTupleRace(t *testing.T) {
	const local, peer, other = "10.0.0.1:5300", "192.0.2.1:53", "192.0.2.2:53"
	// Each configuration runs for protocolBudget, and the port's sockets
	// are as many as the hybrid's default threshold: each strategy with
	// its defaults.
	for _, c := range demuxtest.Strategies() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			tab, err := demux.New[string](cfg)
			require.NoError(t, err)
			o := demux.Options{Addr: ad("10.0.0.1"), Port: 5300, ReuseAddr: true}
			w, err := tab.Bind(o, "W")
			require.NoError(t, err)
			m, err := tab.Bind(o, "M")
			require.NoError(t, err)
			require.NoError(t, m.Connect(ap(peer), ad("10.0.0.1")))
			require.NoError(t, w.Connect(ap(peer), ad("10.0.0.1")))
			// Sockets on devices a lookup on interface 1 never
			// matches, ahead of the mover on the chain: a scan reads
			// them between the mark and the mover, which widens the
			// window in which the mover can join behind its back.
			// With them the port holds the hybrid threshold's 10.
			for i := range 8 {
				_, err := tab.Bind(demux.Options{Addr: ad("10.0.0.1"), Port: 5300, ReuseAddr: true, Device: 100 + i}, "filler")
				require.NoError(t, err)
			}

			var moves, lookups, bad atomic.Int64
			var moveErr atomic.Value
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
					}
					for _, to := range []string{other, peer} {
						if err := m.Connect(ap(to), ad("10.0.0.1")); err != nil {
							moveErr.Store(err)
							bad.Add(1)
							return
						}
					}
					moves.Add(1)
				}
			}()
			deadline := time.Now().Add(protocolBudget())
			for (moves.Load() < 2000 || time.Now().Before(deadline)) && moves.Load() < 20000 && bad.Load() == 0 {
				if s, v := tab.Lookup(ap(peer), ap(local), 1); s != w {
					t.Errorf("lookup %d, after %d moves: got %q", lookups.Load(), moves.Load(), v)
					bad.Add(1)
				}
				lookups.Add(1)
			}
			close(stop)
			<-done
			t.Logf("%d lookups during %d moves", lookups.Load(), moves.Load())
			assert.Nil(t, moveErr.Load(), "a move failed")
			assert.Zero(t, bad.Load(), "a lookup missed the receiver, or a move failed")
			assert.GreaterOrEqual(t, moves.Load(), int64(100), "too few moves raced with the lookups")
			require.NoError(t, tab.Verify())
		})
	}
}
