package grow

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

// TestEveryClassScored: a key of the indexes with several classes keeps
// the newest head of each, and a search must score every one of them,
// not only the first (Val.First), which is the class that came first and
// may well lose. In each case the first class of the key loses to a
// later one, and the lookups through the indexes (two-phase) must agree
// with the scans of the port's chain (one-phase, and hybrid on a port this
// short).
//
// The 4-tuple case guards search's shortcut, which takes a 4-tuple match
// bound to the destination at once: only when its key has one class
// (mutation conn-exact-rest-ignored), since a later class of the same
// 4-tuple (here one bound to the datagram's device, first connected
// later) beats it. Every case guards offer, which scores the classes
// beyond the first (mutation index-rest-ignored). Lookup4 hands these
// keys to the same search, and must agree too.
func TestEveryClassScored(t *testing.T) {
	const port = 5400
	local := netip.MustParseAddr("10.0.0.1")
	peer := netip.MustParseAddrPort("192.0.2.1:53")
	dst := netip.AddrPortFrom(local, port)
	for _, tc := range []struct {
		name string
		// build binds the sockets, the key's first class first, and
		// returns the one that receives peer → dst on interface 1.
		build func(t *testing.T, w *writer) *wsock
	}{
		{"wildcard key: an unconnected class, then one connected without a source", func(t *testing.T, w *writer) *wsock {
			w.bind(netip.IPv4Unspecified(), port, bindOpts{})
			s := w.bind(netip.IPv4Unspecified(), port, bindOpts{})
			// Connected with no source address, it keeps its wildcard
			// and stays in the wildcard's key, a class of its own.
			require.NoError(t, w.connect(s, peer, netip.IPv4Unspecified()))
			require.True(t, s.sk.Cur.Load().IsWild(), "the connected socket kept its wildcard")
			return s
		}},
		{"address key: a dual-stack class, then an IPv4 one", func(t *testing.T, w *writer) *wsock {
			// ::ffff:10.0.0.1 and 10.0.0.1 share a key; the IPv4
			// socket scores higher.
			w.bind(netip.MustParseAddr("::ffff:10.0.0.1"), port, bindOpts{})
			return w.bind(local, port, bindOpts{})
		}},
		{"4-tuple key: a class of no device, then one bound to the device", func(t *testing.T, w *writer) *wsock {
			first := w.bind(local, port, bindOpts{})
			require.NoError(t, w.connect(first, peer, local))
			s := w.bind(local, port, bindOpts{device: 1})
			require.NoError(t, w.connect(s, peer, local))
			return s
		}},
	} {
		for _, th := range thresholds {
			t.Run(tc.name+"/"+th.name, func(t *testing.T) {
				w := newWriter(t, th.threshold, 11)
				want := tc.build(t, w)
				w.verify()
				if th.threshold == AlwaysIndex {
					requireClasses(t, w, want.sk.Cur.Load())
				}
				got, _ := w.lookup(peer, dst, 1)
				assert.Same(t, want.sk, got, "Lookup")
				got, _ = w.lookup4(peer, dst, 1)
				assert.Same(t, want.sk, got, "Lookup4")
			})
		}
	}
}

// requireClasses fails the test unless e's key holds more than one class,
// e's not the first: what TestEveryClassScored's cases are built for.
func requireClasses(t *testing.T, w *writer, e *lookup.Entry) {
	t.Helper()
	var hd Val[lookup.Entry]
	var ok bool
	if inConns(e) {
		k := connKeyOf(e)
		hd, ok = w.g.conns.Get(w.g.connHash(&k), k)
	} else {
		k := addrKeyOf(e)
		hd, ok = w.g.addrs.Get(w.g.addrHash(k), k)
	}
	require.True(t, ok, "the receiver's key")
	require.NotNil(t, hd.Rest, "the receiver's key has one class")
	require.NotSame(t, e, hd.First, "the receiver's class is the key's first")
}
