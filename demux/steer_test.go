package demux_test

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

var steerDst = netip.MustParseAddrPort("10.0.0.1:443")

// steerFlows returns n distinct IPv4 flows to steerDst.
func steerFlows(n int) []netip.AddrPort {
	out := make([]netip.AddrPort, n)
	for i := range out {
		out[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), uint16(1024+i%50000))
	}
	return out
}

// bindGroup binds n ReusePort sockets on 0.0.0.0:443 with values first,
// first+1, ...
func bindGroup(t *testing.T, tab *demux.Table[int], first, n int) []*demux.Socket[int] {
	t.Helper()
	var ss []*demux.Socket[int]
	for i := range n {
		s, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 443, ReusePort: true}, first+i)
		require.NoError(t, err)
		ss = append(ss, s)
	}
	return ss
}

func memberValues(m demux.Members[int]) []int {
	var out []int
	for _, s := range m.All() {
		out = append(out, s.Value())
	}
	return out
}

// TestGroupReport: a socket reports its group and the members; sockets
// outside any group report none.
func TestGroupReport(t *testing.T) {
	for _, c := range demuxtest.Configs() {
		t.Run(c.Name, func(t *testing.T) { groupReport(t, c.Table) })
	}
}

func groupReport(t *testing.T, cfg demux.Config) {
	tab, err := demux.New[int](cfg)
	require.NoError(t, err)
	ss := bindGroup(t, tab, 0, 3)
	other, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("10.0.0.1"), Port: 443, ReusePort: true}, 9)
	require.NoError(t, err)
	plain, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("10.0.0.2"), Port: 444}, 10)
	require.NoError(t, err)

	g0, ok := ss[0].Group()
	require.True(t, ok)
	g2, _ := ss[2].Group()
	assert.True(t, g0 == g2, "members of one group report different groups")
	assert.Equal(t, []int{0, 1, 2}, memberValues(g0.Members()))
	assert.Equal(t, 3, g0.Members().Len())
	assert.Same(t, ss[1], g0.Members().At(1))
	og, ok := other.Group()
	require.True(t, ok)
	assert.False(t, og == g0, "another address, same group")
	assert.Equal(t, []int{9}, memberValues(og.Members()))
	_, ok = plain.Group()
	assert.False(t, ok, "a socket without ReusePort is in a group")

	// Connected and closed sockets leave the group.
	require.NoError(t, tab.Connect(ss[1], netip.MustParseAddrPort("198.18.0.1:9"), netip.MustParseAddr("10.0.0.1")))
	_, ok = ss[1].Group()
	assert.False(t, ok, "a connected socket is in a group")
	require.NoError(t, tab.Close(ss[0]))
	_, ok = ss[0].Group()
	assert.False(t, ok, "a closed socket is in a group")
	assert.Equal(t, []int{2}, memberValues(g0.Members()))
	var zero demux.Group[int]
	assert.Equal(t, 0, zero.Members().Len())
	assert.Nil(t, zero.Pick(steerFlows(1)[0], steerDst, 1))
	zero.SetSelector(nil) // no panic
}

// TestSelector: a selector steers every flow; when it declines (or answers
// an index out of range) the flow hash picks, as Group.Pick says; it sees
// the datagram and the flow hash the default choice uses.
func TestSelector(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		t.Run(st.Name, func(t *testing.T) { testSelector(t, st.Table) })
	}
}

func testSelector(t *testing.T, cfg demux.Config) {
	tab, err := demux.New[int](cfg)
	require.NoError(t, err)
	ss := bindGroup(t, tab, 0, 5)
	g, _ := ss[0].Group()
	flows := steerFlows(500)
	def := make([]*demux.Socket[int], len(flows))
	for i, src := range flows {
		def[i] = g.Pick(src, steerDst, 7)
		s, _ := tab.Lookup(src, steerDst, 7)
		require.Same(t, def[i], s, "Lookup and Pick disagree without a selector")
	}

	// Steer by source port, like a QUIC server by connection ID; decline
	// the odd ports, answer out of range for ports ≡ 2 mod 4.
	g.SetSelector(func(d demux.Datagram, hash uint32, m demux.Members[int]) int {
		assert.Equal(t, steerDst, d.Dst)
		assert.Equal(t, 7, d.Ifindex)
		assert.True(t, d.Src.Addr().Is4(), "IPv4 source in mapped form")
		switch p := int(d.Src.Port()); {
		case p%2 == 1:
			return -1
		case p%4 == 2:
			return m.Len()
		default:
			return p / 4 % m.Len()
		}
	})
	for i, src := range flows {
		want := def[i]
		if p := int(src.Port()); p%4 == 0 {
			want = ss[p/4%5]
		}
		s, _ := tab.Lookup(src, steerDst, 7)
		require.Same(t, want, s, "flow %v", src)
		require.Same(t, want, g.Pick(src, steerDst, 7), "Pick disagrees with Lookup for %v", src)
	}
	// Batches are steered alike.
	ds := make([]demux.Datagram, len(flows))
	for i, src := range flows {
		ds[i] = demux.Datagram{Src: src, Dst: steerDst, Ifindex: 7}
	}
	out := make([]*demux.Socket[int], len(ds))
	tab.LookupBatch(ds, out)
	for i, src := range flows {
		s, _ := tab.Lookup(src, steerDst, 7)
		require.Same(t, s, out[i], "LookupBatch disagrees with Lookup for %v", src)
	}
	// A socket joining later is steered too; a selector answering the
	// default from the hash changes nothing.
	late := bindGroup(t, tab, 5, 1)[0]
	lg, _ := late.Group()
	require.True(t, lg == g)
	g.SetSelector(func(_ demux.Datagram, hash uint32, m demux.Members[int]) int {
		return int(uint64(hash) * uint64(m.Len()) >> 32)
	})
	viaHash := make([]*demux.Socket[int], len(flows))
	for i, src := range flows {
		viaHash[i], _ = tab.Lookup(src, steerDst, 7)
	}
	g.SetSelector(nil)
	for i, src := range flows {
		s, _ := tab.Lookup(src, steerDst, 7)
		require.Same(t, viaHash[i], s, "the hash a selector gets is not the flow hash")
	}
}

// remapped returns the fraction of flows whose receiver changed between
// before and after.
func remapped(before, after []int) float64 {
	n := 0
	for i := range before {
		if before[i] != after[i] {
			n++
		}
	}
	return float64(n) / float64(len(before))
}

func receivers(t *testing.T, tab *demux.Table[int], flows []netip.AddrPort) []int {
	out := make([]int, len(flows))
	for i, src := range flows {
		s, v := tab.Lookup(src, steerDst, 1)
		require.NotNil(t, s)
		out[i] = v
	}
	return out
}

// TestReusePortRemap measures how many flows change member when one joins
// or leaves a group of n, with the flow hash and with Rendezvous. The flow
// hash moves half on a join (hash·n/2³² keeps a flow only where the n and
// n+1 partitions of [0, 1) overlap: half of it) and, for the 4th of 9
// leaving, 41/72 ≈ 57%; Rendezvous moves about 1/(n+1) on a join, all to
// the newcomer, and exactly the leaver's flows on a leave.
func TestReusePortRemap(t *testing.T) {
	const n = 8
	flows := steerFlows(20000)
	for _, tc := range []struct {
		name string
		sel  demux.Selector[int]
	}{{"flowhash", nil}, {"rendezvous", demux.Rendezvous[int](nil)}, {"rendezvous-by-value", demux.Rendezvous(func(s *demux.Socket[int]) uint64 { return uint64(s.Value()) })}} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := demux.New[int](demux.Config{})
			require.NoError(t, err)
			ss := bindGroup(t, tab, 0, n)
			g, _ := ss[0].Group()
			g.SetSelector(tc.sel)
			before := receivers(t, tab, flows)
			bindGroup(t, tab, n, 1)
			joined := receivers(t, tab, flows)
			require.NoError(t, tab.Close(ss[3]))
			left := receivers(t, tab, flows)
			join, leave := remapped(before, joined), remapped(joined, left)
			t.Logf("%s: join %d→%d moved %.3f of flows, leave %d→%d moved %.3f", tc.name, n, n+1, join, n+1, n, leave)
			if tc.sel == nil {
				assert.InDelta(t, 0.5, join, 0.05)
				// A flow at x in [0, 1) stays where ⌊9x⌋ = ⌊8x⌋ = k, an
				// interval of length (8-k)/72, unless k is the leaver's
				// index 3, which the last member took: 31/72 stay.
				assert.InDelta(t, 41.0/72, leave, 0.02)
				return
			}
			assert.InDelta(t, 1.0/(n+1), join, 0.02)
			for i := range flows {
				if before[i] != joined[i] {
					require.Equal(t, n, joined[i], "a join moved a flow to an old member")
				}
				if joined[i] != left[i] {
					require.Equal(t, 3, joined[i], "a leave moved a flow of a staying member")
				}
			}
		})
	}
}

// TestSteerAllocs: lookups that end in a group allocate nothing, with or
// without a selector.
func TestSteerAllocs(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		steerAllocs(t, st.Table)
	}
}

func steerAllocs(t *testing.T, cfg demux.Config) {
	tab, err := demux.New[int](cfg)
	require.NoError(t, err)
	ss := bindGroup(t, tab, 0, 8)
	g, _ := ss[0].Group()
	flows := steerFlows(64)
	for _, sel := range []demux.Selector[int]{nil, demux.Rendezvous[int](nil), func(d demux.Datagram, _ uint32, m demux.Members[int]) int {
		return int(d.Src.Port()) % m.Len()
	}} {
		g.SetSelector(sel)
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			tab.Lookup(flows[i%len(flows)], steerDst, 1)
			i++
		})
		assert.Zero(t, allocs)
		allocs = testing.AllocsPerRun(1000, func() {
			g.Pick(flows[i%len(flows)], steerDst, 1)
			i++
		})
		assert.Zero(t, allocs)
	}
}

// TestSelectorPayload: a selector sees the payload that LookupDatagram and
// LookupBatch are given (in every storage, and with path counting, which
// takes LookupBatch off its staged path), and nil from Lookup; a batch
// whose datagrams are all IPv4 carries it too.
func TestSelectorPayload(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		for _, count := range []bool{false, true} {
			cfg := st.Table
			cfg.CountPaths = count
			t.Run(fmt.Sprintf("%s/CountPaths=%v", st.Name, count), func(t *testing.T) {
				for _, addr := range []string{"0.0.0.0", "::"} {
					tab, err := demux.New[int](cfg)
					require.NoError(t, err)
					var g demux.Group[int]
					for i := range 4 {
						s, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr(addr), Port: 443, ReusePort: true}, i)
						require.NoError(t, err)
						g, _ = s.Group()
					}
					var seen atomic.Pointer[[]byte]
					g.SetSelector(func(d demux.Datagram, _ uint32, m demux.Members[int]) int {
						seen.Store(&d.Payload)
						if len(d.Payload) == 0 {
							return -1
						}
						return int(d.Payload[0]) % m.Len()
					})
					src, dst := netip.MustParseAddrPort("127.0.0.9:999"), netip.MustParseAddrPort("127.0.0.1:443")
					if addr == "::" {
						src, dst = netip.MustParseAddrPort("[::9]:999"), netip.MustParseAddrPort("[::1]:443")
					}
					for w := range 4 {
						p := []byte{byte(w), 0xff}
						_, v := tab.LookupDatagram(demux.Datagram{Src: src, Dst: dst, Payload: p})
						assert.Equal(t, w, v, "LookupDatagram")
						assert.Equal(t, p, *seen.Load())
						ds := make([]demux.Datagram, 5)
						for i := range ds {
							ds[i] = demux.Datagram{Src: src, Dst: dst, Payload: []byte{byte(w + i)}}
						}
						out := make([]*demux.Socket[int], len(ds))
						require.Equal(t, len(ds), tab.LookupBatch(ds, out))
						for i, s := range out {
							require.NotNil(t, s)
							assert.Equal(t, (w+i)%4, s.Value(), "LookupBatch %d", i)
						}
					}
					tab.Lookup(src, dst, 0)
					assert.Nil(t, *seen.Load(), "Lookup has no payload")
				}
			})
		}
	}
}
