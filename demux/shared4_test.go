package demux_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestSharedTuple holds sockets that share a 4-tuple, where the newest
// first connect wins whatever the order of the binds, so that a scan of
// the port that stopped at its first 4-tuple match would answer wrongly.
// The sockets are bound so that the loser comes first on the port's
// chain. This is the rule on every configuration; the growing tables'
// means of keeping it (the chain's mark, and when a scan may stop) are
// tested in package grow (TestSharedTuple, TestScanStopsOnlyWhenSafe,
// TestSharedTupleRace).
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
