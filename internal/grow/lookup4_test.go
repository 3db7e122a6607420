package grow

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

// thresholds are the engine's lookup rules, as demux's strategies set
// them: two-phase, hybrid with demux's default threshold, one-phase.
var thresholds = []struct {
	name      string
	threshold int
}{{"TwoPhase", AlwaysIndex}, {"Hybrid", 10}, {"OnePhase", AlwaysScan}}

// TestLookup4MatchesLookup: the IPv4 path (Lookup4) gives every IPv4
// datagram the socket and path that the general search (Lookup) gives it,
// after every op of a random sequence of binds, connects, disconnects and
// closes, on every datagram of a fixed set. The sockets are few enough
// addresses, peers and devices apart that keys with several classes,
// 4-tuples shared or differing only by device, SO_REUSEPORT groups,
// v4-mapped and dual-stack sockets and the 127.0.0.6 placeholder all
// occur; counters of what the comparisons met check that they did.
func TestLookup4MatchesLookup(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 1000
	}
	binds := []netip.Addr{
		netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
		netip.MustParseAddr("127.0.0.6"), netip.MustParseAddr("::"), netip.MustParseAddr("::ffff:10.0.0.1"),
		netip.MustParseAddr("::ffff:0.0.0.0"), netip.MustParseAddr("2001:db8::1"),
	}
	// Port 54 has no wildcard socket but dual-stack "::" ones, which
	// most often connect to an IPv6 peer as soon as bound: datagrams to
	// 127.0.0.6 that no socket takes go to the placeholder fallback
	// there.
	peer6 := netip.MustParseAddrPort("[2001:db8::7]:53")
	binds54 := []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::"), netip.MustParseAddr("::"),
		netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("2001:db8::1"),
	}
	peers := []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:53"), netip.MustParseAddrPort("192.0.2.1:54"),
		netip.MustParseAddrPort("192.0.2.2:53"), netip.MustParseAddrPort("[::ffff:192.0.2.1]:53"),
		netip.MustParseAddrPort("[2001:db8::7]:53"),
	}
	sources := []netip.Addr{
		{}, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("2001:db8::1"),
	}
	// The datagrams compared: from the IPv4 peers and a stranger, to
	// the bound addresses, the placeholder, an address no socket has
	// and another port, on no interface and on the devices bound to.
	srcs := []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:53"), netip.MustParseAddrPort("192.0.2.1:54"),
		netip.MustParseAddrPort("192.0.2.2:53"), netip.MustParseAddrPort("198.51.100.1:53"),
	}
	dsts := []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:53"), netip.MustParseAddrPort("10.0.0.2:53"),
		netip.MustParseAddrPort("127.0.0.6:53"), netip.MustParseAddrPort("10.0.0.9:53"),
		netip.MustParseAddrPort("10.0.0.1:54"), netip.MustParseAddrPort("127.0.0.6:54"),
	}
	for ci, c := range thresholds {
		t.Run(c.name, func(t *testing.T) {
			w := newWriter(t, c.threshold, uint64(41+ci))
			r := rand.New(rand.NewPCG(uint64(41+ci), 0x4444))
			var socks []*wsock
			met := map[string]int{}
			compared := 0
			for i := range n {
				op := ""
				switch k := r.IntN(10); {
				case k < 4 && len(socks) < 40 || len(socks) == 0:
					port, a := uint16(53), binds[r.IntN(len(binds))]
					if r.IntN(3) == 0 {
						port, a = 54, binds54[r.IntN(len(binds54))]
					}
					o := bindOpts{
						v6only:    a == netip.IPv6Unspecified() && r.IntN(4) == 0,
						reusePort: r.IntN(3) == 0,
						owner:     uint32(r.IntN(2)),
						device:    []int32{0, 0, 1, 2}[r.IntN(4)],
					}
					s := w.bind(a, port, o)
					socks = append(socks, s)
					op = fmt.Sprintf("bind %v:%d %+v", a, port, o)
					if port == 54 && a == netip.IPv6Unspecified() && r.IntN(4) != 0 {
						require.NoError(t, w.connect(s, peer6, netip.MustParseAddr("2001:db8::1")))
						op += ", connect to " + peer6.String()
					}
				case k < 7:
					s := socks[r.IntN(len(socks))]
					p, src := peers[r.IntN(len(peers))], sources[r.IntN(len(sources))]
					if w.connect(s, p, src) != nil {
						continue
					}
					op = fmt.Sprintf("connect to %v from %v", p, src)
				case k < 8:
					w.disconnect(socks[r.IntN(len(socks))])
					op = "disconnect"
				default:
					j := r.IntN(len(socks))
					w.close(socks[j])
					socks = append(socks[:j], socks[j+1:]...)
					op = "close"
				}
				if i%50 == 0 {
					w.verify("op %d: %s", i, op)
				}
				for _, src := range srcs {
					for _, dst := range dsts {
						for ifindex := range 3 {
							want, wp := w.lookup(src, dst, ifindex)
							got, gp := w.lookup4(src, dst, ifindex)
							require.Equal(t, want, got, "op %d (%s): %v → %v on %d", i, op, src, dst, ifindex)
							require.Equal(t, wp, gp, "op %d (%s): path of %v → %v on %d", i, op, src, dst, ifindex)
							compared++
							tally(met, want, wp, dst)
						}
					}
				}
			}
			t.Logf("%d lookups compared; met %v", compared, met)
			for _, what := range []string{"connected", "group", "placeholder", "mapped"} {
				assert.Positive(t, met[what], "lookups answered by a %s socket", what)
			}
			if c.threshold != AlwaysScan {
				assert.Positive(t, met["secondary"], "lookups that searched the indexes")
			}
			w.verify("end")
		})
	}
}

// tally counts in met what answered a lookup to dst: the path, and the
// kind of socket.
func tally(met map[string]int, s *lookup.Socket, p lookup.Path, dst netip.AddrPort) {
	if p == lookup.Secondary {
		met["secondary"]++
	}
	if s == nil {
		return
	}
	e := s.Cur.Load()
	if e.Has(lookup.Connected) {
		met["connected"]++
	}
	if e.Group != nil && e.Group.Len() > 1 {
		met["group"]++
	}
	if e.Has(lookup.Is6|lookup.Connected) && e.V4 == lookup.Placeholder4 && dst.Addr() == netip.AddrFrom4([4]byte{127, 0, 0, 6}) {
		met["placeholder"]++
	}
	if e.Has(lookup.Is6) && e.V6.IsMapped() && e.V6 != lookup.Wild4 {
		met["mapped"]++
	}
}

// TestConnectedNeighbours: many connected sockets on one address and port
// whose peers differ only in their port, or only in their address, each
// receive their own peer's datagrams, and unknown peers reach the
// listener. With 4 096 peers of each kind, many pairs of 4-tuples share
// a line of the 4-tuple index and the 7-bit tag of their hashes there,
// so that a Lookup4 that checked the tag and not each field of the key
// would take a neighbour's socket (mutations lookup4-fast-*-unchecked).
func TestConnectedNeighbours(t *testing.T) {
	local := netip.MustParseAddrPort("10.0.0.1:4433")
	for _, tc := range []struct {
		name string
		peer func(i int) netip.AddrPort
	}{
		{"ports", func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.MustParseAddr("172.16.0.1"), uint16(10000+i))
		}},
		{"addresses", func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)}), 40000)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4096
			w := newWriter(t, 10, 7)
			listener := w.bind(local.Addr(), local.Port(), bindOpts{})
			socks := make([]*wsock, n)
			for i := range n {
				socks[i] = w.bind(local.Addr(), local.Port(), bindOpts{})
				require.NoError(t, w.connect(socks[i], tc.peer(i), netip.Addr{}))
			}
			w.verify()
			for i := range n {
				got, _ := w.lookup4(tc.peer(i), local, 1)
				require.Same(t, socks[i].sk, got, "peer %v", tc.peer(i))
			}
			for i := n; i < 2*n; i++ {
				got, _ := w.lookup4(tc.peer(i), local, 1)
				require.Same(t, listener.sk, got, "unknown peer %v", tc.peer(i))
			}
		})
	}
}

// TestLookup4Refuses: Lookup4 reports false, and no socket, for a datagram
// that no socket can receive (to an unspecified address or to port 0),
// although a wildcard socket on the port would take it otherwise; it
// takes a deliverable one.
func TestLookup4Refuses(t *testing.T) {
	w := newWriter(t, 10, 8)
	wild := w.bind(netip.IPv4Unspecified(), 53, bindOpts{})
	src := netip.MustParseAddrPort("192.0.2.1:1000")
	for _, tc := range []struct {
		dst  string
		want *lookup.Socket
		ok   bool
	}{
		{"0.0.0.0:53", nil, false},
		{"10.0.0.1:0", nil, false},
		{"0.0.0.0:0", nil, false},
		{"10.0.0.1:53", wild.sk, true},
	} {
		var q lookup.Query
		r, _, ok := w.g.Lookup4(src, netip.MustParseAddrPort(tc.dst), 1, &q)
		assert.Equal(t, tc.ok, ok, tc.dst)
		assert.Same(t, tc.want, sockOf(r), tc.dst)
	}
}

// TestSearch4SeesMoves: search4, the IPv4 path's search of the keys of
// one class, reports false, for the general search to run, when a move
// on the port was under way or happened since the port's sequence count
// was read. Here a wildcard socket connects from the destination, and so
// leaves the wildcard's key for the 4-tuple index, between the count's
// read and the search: the search finds it in neither key it reads, and
// must not answer "no socket". (demux's
// TestConnectMoveNeverMissedOneClass races the same move with lookups.)
func TestSearch4SeesMoves(t *testing.T) {
	const port = 4000
	peer := netip.MustParseAddrPort("192.0.2.7:53")
	dst := netip.MustParseAddrPort("10.0.0.1:4000")
	tuple := func() *lookup.Tuple4 {
		var t lookup.Tuple4
		t.Src, t.Dst, t.SrcPort, t.DstPort, t.Ifindex = lookup.V4(peer.Addr()), lookup.V4(dst.Addr()), peer.Port(), port, lookup.Device(1)
		return &t
	}
	w := newWriter(t, AlwaysIndex, 9)
	m := w.bind(netip.IPv4Unspecified(), port, bindOpts{})
	slot := w.g.port(port)

	seq := slot.list.Seq.Peek()
	e, ok := w.g.search4(slot, tuple(), seq, 0, false)
	require.True(t, ok, "no move: search4 answers")
	require.Same(t, m.sk, e.Ref.Sock)

	require.NoError(t, w.connect(m, peer, dst.Addr()))
	e, ok = w.g.search4(slot, tuple(), seq, 0, false)
	assert.False(t, ok, "a move since the count's read: search4 answered %v", e)

	pr := w.g.LockPort(port)
	pr.s.list.Seq.Begin()
	e, ok = w.g.search4(slot, tuple(), slot.list.Seq.Peek(), 0, false)
	assert.False(t, ok, "a move under way: search4 answered %v", e)
	pr.s.list.Seq.End()
	w.g.Unlock(pr)

	got, _ := w.lookup4(peer, dst, 1)
	assert.Same(t, m.sk, got, "Lookup4 after the move")
}

// TestExact4SeesMoves: exact4, the IPv4 path's shortcut to a socket bound
// to the destination, answers only while the port's sequence count is
// even and unchanged since it was read, as search4 does; and it reports a
// key absent only if it is in neither its line's positions nor its chain,
// since search4 then does not read it.
func TestExact4SeesMoves(t *testing.T) {
	const port = 4000
	v4 := func(s string) uint32 { return lookup.V4(netip.MustParseAddr(s)) }
	w := newWriter(t, AlwaysIndex, 9)
	m := w.bind(netip.MustParseAddr("10.0.0.1"), port, bindOpts{})
	slot := w.g.port(port)

	seq := slot.list.Seq.Peek()
	e, absent := w.g.exact4(slot, v4("10.0.0.1"), port, seq)
	require.NotNil(t, e, "no move: exact4 answers")
	require.Same(t, m.sk, e.Ref.Sock)
	require.False(t, absent)

	pr := w.g.LockPort(port)
	pr.s.list.Seq.Begin()
	e, _ = w.g.exact4(slot, v4("10.0.0.1"), port, slot.list.Seq.Peek())
	assert.Nil(t, e, "a move under way: exact4 answered")
	pr.s.list.Seq.End()
	w.g.Unlock(pr)
	e, _ = w.g.exact4(slot, v4("10.0.0.1"), port, seq)
	assert.Nil(t, e, "a move since the count's read: exact4 answered")

	seq = slot.list.Seq.Peek()
	e, absent = w.g.exact4(slot, v4("10.0.0.9"), port, seq)
	assert.True(t, e == nil && absent, "a key no socket has")

	// An IPv4 and a v4-mapped IPv6 socket on 10.0.0.2: one key of two
	// classes, kept in the chain.
	w.bind(netip.MustParseAddr("10.0.0.2"), port, bindOpts{})
	w.bind(netip.MustParseAddr("::ffff:10.0.0.2"), port, bindOpts{})
	e, absent = w.g.exact4(slot, v4("10.0.0.2"), port, slot.list.Seq.Peek())
	assert.True(t, e == nil && !absent, "a key in the chain: got %v, absent %v", e, absent)
}
