package grow

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

// TestClosedEntryKeepsItsNext: a lock-free reader standing on an entry
// that is closed meanwhile goes on from it to the rest of the chain it was
// walking, as in the kernel's RCU lists: Unlink leaves the entry's next
// links as they were. A scan of a short port's chain (Lookup, Multicast)
// walks the port chain (N1); a multicast search walks a class chain (N2)
// from its head. Here the reader has reached the closed socket's entry
// when the close comes; a port chain cut there (mutation
// grow-unlink-drops-next) hides every socket behind it, so the scan of
// the datagram to 10.0.0.1, whose socket is the oldest, finds nothing.
func TestClosedEntryKeepsItsNext(t *testing.T) {
	const port = 5800
	peer := netip.MustParseAddrPort("192.0.2.1:53")
	for _, tc := range []struct {
		name  string
		addrs []string // bound in this order: the chains hold them newest first
		// connect is the socket that connects to peer before the
		// close, -1 for none.
		connect int
		stand   int  // the socket the reader stands on, which closes
		class   bool // walk the class chain (N2), not the port chain (N1)
		want    []int
	}{
		{"port chain, a middle socket", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, -1, 1, false, []int{0}},
		{"port chain, its head", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, -1, 2, false, []int{1, 0}},
		{"port chain, a connected socket", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, 1, 1, false, []int{0}},
		{"class chain, a middle member", []string{"0.0.0.0", "0.0.0.0", "0.0.0.0"}, -1, 1, true, []int{0}},
		{"class chain, its head", []string{"0.0.0.0", "0.0.0.0", "0.0.0.0"}, -1, 2, true, []int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(t, AlwaysScan, 15)
			var socks []*wsock
			for _, a := range tc.addrs {
				socks = append(socks, w.bind(netip.MustParseAddr(a), port, bindOpts{}))
			}
			if tc.connect >= 0 {
				s := socks[tc.connect]
				require.NoError(t, w.connect(s, peer, s.addr))
			}
			e := socks[tc.stand].sk.Cur.Load()
			n := &e.N1
			if tc.class {
				n = &e.N2
			}
			w.close(socks[tc.stand])
			w.verify()

			var got []*lookup.Socket
			for x := n.Next.Load(); x != nil; x = x.Next.Load() {
				of := lookup.OfPrimary
				if tc.class {
					of = lookup.OfSecondary
				}
				got = append(got, of(x).Ref.Sock)
			}
			var want []*lookup.Socket
			for _, i := range tc.want {
				want = append(want, socks[i].sk)
			}
			assert.Equal(t, want, got, "the sockets the reader reaches after the closed one")
			if !tc.class {
				var q lookup.Query
				require.True(t, q.Init(peer, netip.AddrPortFrom(netip.MustParseAddr(tc.addrs[0]), port), 1))
				b := lookup.Best{}
				b.ScanPrimary(n, &q)
				require.NotNil(t, b.E, "a scan from the closed entry found nothing")
				assert.Same(t, socks[0].sk, b.E.Ref.Sock, "a scan from the closed entry")
			}
		})
	}
}
