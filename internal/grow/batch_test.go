package grow

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

// TestBatchSkipsUndeliverable: LookupBatch and LookupBatch4 give each
// datagram that ok marks deliverable the socket Lookup (Lookup4) gives
// it, and nil to each one it marks undeliverable, which they must not
// look up at all: Query.Init and Tuple4.Init fill in what they refuse,
// and a lookup of that would find a socket. Here a datagram to 0.0.0.0
// would reach the port's wildcard socket (bound to the very address it
// is sent to), and so would a Query of one whose source is of the other
// family (mutations batch-undeliverable-looked-up and
// batch4-undeliverable-looked-up). Every out[i] starts as a stale
// socket, which each must replace.
func TestBatchSkipsUndeliverable(t *testing.T) {
	const port = 5600
	src := netip.MustParseAddrPort("192.0.2.1:1000")
	datagrams := []struct {
		src, dst string
		want     string // "" for none
	}{
		{src.String(), "10.0.0.1:5600", "wild"},
		{src.String(), "0.0.0.0:5600", ""}, // undeliverable
		{src.String(), "10.0.0.2:5600", "addr"},
		{"[2001:db8::1]:1000", "10.0.0.1:5600", ""}, // undeliverable: an IPv6 source
		{src.String(), "10.0.0.1:5601", ""},         // no socket on the port
		{src.String(), "10.0.0.1:0", ""},            // undeliverable
	}
	for _, th := range thresholds {
		t.Run(th.name, func(t *testing.T) {
			w := newWriter(t, th.threshold, 13)
			socks := map[string]*lookup.Socket{
				"wild": w.bind(netip.IPv4Unspecified(), port, bindOpts{}).sk,
				"addr": w.bind(netip.MustParseAddr("10.0.0.2"), port, bindOpts{}).sk,
			}
			n := len(datagrams)
			qs, ts := make([]lookup.Query, n), make([]lookup.Tuple4, n)
			ok, ok4 := make([]bool, n), make([]bool, n)
			for i, d := range datagrams {
				s, dst := netip.MustParseAddrPort(d.src), netip.MustParseAddrPort(d.dst)
				ok[i] = qs[i].Init(s, dst, 1)
				ok4[i] = ts[i].Init(s, dst, 1)
				want := socks[d.want]
				if ok[i] {
					q := qs[i]
					r, _ := w.g.Lookup(&q)
					require.Same(t, want, sockOf(r), "datagram %d: Lookup", i)
				} else {
					require.Nil(t, want, "datagram %d", i)
				}
			}
			// The premise: the undeliverable datagrams, looked up as
			// Init left them, would reach the wildcard socket.
			for _, i := range []int{1, 3} {
				require.False(t, ok[i])
				q := qs[i]
				r, _ := w.g.Lookup(&q)
				require.Same(t, socks["wild"], sockOf(r), "datagram %d: a lookup of the refused query", i)
			}
			require.False(t, ok4[1])
			var q lookup.Query
			t4 := ts[1]
			r, _ := w.g.lookup4(t4.Src, t4.Dst, t4.SrcPort, t4.DstPort, t4.Ifindex, &q)
			require.Same(t, socks["wild"], sockOf(r), "datagram 1: a lookup of the refused tuple")

			stale := new(lookup.Socket)
			for _, batch := range []struct {
				name string
				run  func(out []*lookup.Socket)
			}{
				{"LookupBatch", func(out []*lookup.Socket) { w.g.LookupBatch(qs, ok, out) }},
				{"LookupBatch4", func(out []*lookup.Socket) { w.g.LookupBatch4(ts, ok4, out) }},
			} {
				out := make([]*lookup.Socket, n)
				for i := range out {
					out[i] = stale
				}
				batch.run(out)
				for i, d := range datagrams {
					assert.Same(t, socks[d.want], out[i], "%s: datagram %d, %s → %s", batch.name, i, d.src, d.dst)
				}
			}
		})
	}
}
