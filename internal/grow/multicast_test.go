package grow

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

// TestMulticastSeesMoveBetweenKeys: a multicast search of the indexes that
// a move on the port overlapped searches again, from scratch, and yields
// every receiver exactly once. The search reads the 4-tuple index, then
// the destination's key, then the wildcard's; the mover M, a wildcard
// socket, receives the datagram (from peer, to the address M connects
// from) in both of its states: unconnected, under the wildcard's key, and
// connected, in the 4-tuple index. Here the move comes at a set point, a
// whole connect or disconnect of M while the first attempt reads the
// destination's key (the test runs it from the key check of the address
// index, which the search calls on that key: it has two classes, so it
// sits in its line's chain). That attempt has read one of M's places
// before the move and reads the other after it, and so misses M
// (connect) or holds it twice (disconnect).
//
// A search that took that attempt's answer, not checking the port's
// sequence count (mutation grow-multicast-seq-retry), or that kept its
// receivers and appended the next attempt's to them (mutation
// grow-multicast-keeps-partial), yields M other than once or the others
// twice. TestSearchBesideEndlessMoves races real writers with the search.
func TestMulticastSeesMoveBetweenKeys(t *testing.T) {
	const port = 5900
	local := netip.MustParseAddr("10.0.0.1")
	peer := netip.MustParseAddrPort("192.0.2.7:53")
	for _, tc := range []struct {
		name      string
		connected bool // M's state before the move
	}{
		{"connect", false},
		{"disconnect", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(t, AlwaysIndex, 16)
			// The destination's key holds an IPv4 class and a
			// dual-stack one, and the wildcard's key a class of two:
			// these and M receive the datagram.
			receivers := map[*lookup.Socket]string{
				w.bind(local, port, bindOpts{}).sk:                                  "IPv4 " + local.String(),
				w.bind(netip.MustParseAddr("::ffff:10.0.0.1"), port, bindOpts{}).sk: "dual-stack ::ffff:10.0.0.1",
				w.bind(netip.IPv4Unspecified(), port, bindOpts{}).sk:                "0.0.0.0",
			}
			m := w.bind(netip.IPv4Unspecified(), port, bindOpts{})
			receivers[m.sk] = "M"
			if tc.connected {
				require.NoError(t, w.connect(m, peer, local))
			}
			w.verify()

			moved := 0
			is := w.g.addrs.is
			w.g.addrs.is = func(e *lookup.Entry, k addrKey) bool {
				if moved == 0 && k == (addrKey{addr: lookup.Map4(lookup.V4(local)), port: port}) {
					moved++
					if tc.connected {
						w.disconnect(m)
					} else {
						require.NoError(t, w.connect(m, peer, local))
					}
				}
				return is(e, k)
			}
			var q lookup.Query
			require.True(t, q.Init(peer, netip.AddrPortFrom(local, port), 1))
			rs, path := w.g.Multicast(&q, nil)
			w.g.addrs.is = is
			require.Equal(t, 1, moved, "the move ran during the search")
			require.Equal(t, tc.connected, m.sk.Cur.Load().IsWild(), "M moved: wild after a disconnect, not after a connect")
			assert.Equal(t, lookup.Secondary, path)

			yielded := map[string]int{}
			for _, e := range rs {
				name, ok := receivers[e.Ref.Sock]
				if !ok {
					name = "a stranger"
				}
				yielded[name]++
			}
			want := map[string]int{}
			for _, name := range receivers {
				want[name] = 1
			}
			assert.Equal(t, want, yielded, "the receivers, each once")
			w.verify()
		})
	}
}
