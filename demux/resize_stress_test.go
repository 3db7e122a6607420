package demux_test

import (
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

// TestGrowingUnderLookups: while writers bind, connect and close thousands
// of sockets on many ports — growing and shrinking every index of the
// growing tables several times — and move sockets between indexes by
// connect on the readers' own port, readers doing Lookup, LookupBatch and
// LookupMulticast must always find the sockets that never change, never
// get a socket closed before they began, and never see a socket twice in
// one multicast delivery. It runs on both storages: the fixed slots do
// not resize, but their chains grow and shrink as much. Its time budget
// runs per configuration: of demuxtest.Configs it takes the default
// strategy, and the two that index the most ports (two-phase, and hybrid
// with threshold 1), on each storage.
func TestGrowingUnderLookups(t *testing.T) {
	for _, c := range demuxtest.Named(
		"grow/Hybrid/default", "grow/TwoPhase", "grow/Hybrid/threshold1",
		"fixed256/Hybrid/default", "fixed256/TwoPhase", "fixed256/Hybrid/threshold1") {
		t.Run(c.Name, func(t *testing.T) { growingUnderLookups(t, c.Table) })
	}
}

func growingUnderLookups(t *testing.T, cfg demux.Config) {
	tab, err := demux.New[int](cfg)
	require.NoError(t, err)
	const port = 7000
	exact := netip.MustParseAddr("10.0.0.1")
	peer := netip.MustParseAddrPort("192.0.2.1:9000")
	mustBind := func(o demux.Options, v int) *demux.Socket[int] {
		s, err := tab.Bind(o, v)
		require.NoError(t, err)
		return s
	}
	// Unchanged sockets: one bound to 10.0.0.1:7000 (found by datagrams
	// to it from anyone but the connected peer's address), a connected one
	// (found by datagrams from the peer), and a wildcard broadcast
	// listener on 7001.
	const vExact, vConn, vBcast = -1, -2, -3
	mustBind(demux.Options{Addr: exact, Port: port, ReuseAddr: true}, vExact)
	c := mustBind(demux.Options{Addr: exact, Port: port, ReuseAddr: true}, vConn)
	require.NoError(t, tab.Connect(c, peer, netip.Addr{}))
	mustBind(demux.Options{Addr: netip.IPv4Unspecified(), Port: port + 1, ReuseAddr: true}, vBcast)

	// The mover: a wildcard socket on port 7002, alone there but for
	// sockets on other addresses (so lookups use the indexes), connects to
	// moverPeer with local address 10.0.0.1 — moving from the wildcard key
	// to the 4-tuple table — and closes, over and over. A datagram from
	// moverPeer to 10.0.0.1:7002 matches it in both states: a lookup that
	// runs wholly while it is bound must find it.
	const movePort = port + 2
	moverPeer := netip.MustParseAddrPort("203.0.113.1:1")
	for i := range 20 {
		mustBind(demux.Options{Addr: netip.AddrFrom4([4]byte{10, 9, 0, byte(i)}), Port: movePort, ReuseAddr: true}, -10-i)
	}
	var phase atomic.Int64 // odd while mover k = phase/2 is bound

	var epoch atomic.Int64                  // bumped after every close
	closedAt := make([]atomic.Int64, 1<<20) // by churn value: the epoch its close completed in
	var stop atomic.Bool
	var bad atomic.Int64
	var wg sync.WaitGroup
	fail := func(format string, args ...any) {
		if bad.Add(1) < 5 {
			t.Errorf(format, args...)
		}
	}
	stale := func(v, e0 int64) bool {
		return v >= 0 && v < int64(len(closedAt)) && closedAt[v].Load() != 0 && closedAt[v].Load() <= e0
	}
	other := netip.MustParseAddrPort("198.51.100.7:5000")
	ds := []demux.Datagram{
		{Src: other, Dst: netip.AddrPortFrom(exact, port)},
		{Src: peer, Dst: netip.AddrPortFrom(exact, port)},
	}
	// A failing require stops this goroutine only: stop the others too,
	// or they run on and disturb the tests after this one.
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	// Readers.
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]*demux.Socket[int], 2)
			for i := 0; !stop.Load(); i++ {
				e0 := epoch.Load()
				if i%4 == 3 {
					p1 := phase.Load()
					_, v := tab.Lookup(moverPeer, netip.AddrPortFrom(exact, movePort), 0)
					if p2 := phase.Load(); p1 == p2 && p1&1 == 1 && v != 1<<21+int(p1/2) {
						fail("the mover was missed: got %d, want %d", v, 1<<21+int(p1/2))
					}
					continue
				}
				switch (i + r) % 3 {
				case 0:
					_, v1 := tab.Lookup(other, netip.AddrPortFrom(exact, port), 0)
					_, v2 := tab.Lookup(peer, netip.AddrPortFrom(exact, port), 0)
					if v1 != vExact || v2 != vConn {
						fail("Lookup: got %d and %d, want %d and %d", v1, v2, vExact, vConn)
					}
				case 1:
					tab.LookupBatch(ds, out)
					if out[0] == nil || out[1] == nil || out[0].Value() != vExact || out[1].Value() != vConn {
						fail("LookupBatch: got %v", out)
					}
				case 2:
					seen := map[int]bool{}
					tab.LookupMulticast(other, netip.MustParseAddrPort("255.255.255.255:7001"), 0, func(s *demux.Socket[int], v int) bool {
						if seen[v] {
							fail("multicast yielded %d twice", v)
						}
						seen[v] = true
						if stale(int64(v), e0) {
							fail("multicast yielded %d, closed before the delivery began", v)
						}
						return true
					})
					if !seen[vBcast] {
						fail("multicast missed the unchanged listener")
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 0; !stop.Load(); k++ {
			w, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: movePort, ReuseAddr: true}, 1<<21+k)
			if err != nil {
				fail("mover bind: %v", err)
				return
			}
			phase.Store(int64(2*k + 1))
			if err := tab.Connect(w, moverPeer, exact); err != nil {
				fail("mover connect: %v", err)
			}
			for range 50 { // let lookups see it connected too
				if stop.Load() {
					break
				}
			}
			phase.Store(int64(2*k + 2))
			if err := tab.Close(w); err != nil {
				fail("mover close: %v", err)
			}
		}
	}()
	// Writers: churn that resizes every index, and moves on port 7000:
	// at least minRounds rounds, whatever the budget, then rounds until
	// the budget is spent.
	const minRounds = 3
	deadline := time.Now().Add(stressBudget(t, time.Second))
	next := 0
	for round := 0; (round < minRounds || time.Now().Before(deadline)) && next+3000 < len(closedAt); round++ {
		var socks []*demux.Socket[int]
		for i := range 3000 {
			v := next + i
			a := netip.AddrFrom4([4]byte{10, 1, byte(v >> 8), byte(v)})
			p := uint16(20000 + v%500)
			if i%10 == 0 {
				p = port + 1 // broadcast receivers that come and go
				a = netip.IPv4Unspecified()
			}
			s := mustBind(demux.Options{Addr: a, Port: p, ReuseAddr: true}, v)
			if i%3 == 0 && p != port+1 {
				require.NoError(t, tab.Connect(s, netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(v)}), uint16(1+v%60000)), netip.Addr{}))
			}
			if i%50 == 0 {
				// A wildcard socket on the readers' port that connects:
				// it moves from the wildcard key to the 4-tuple table.
				w := mustBind(demux.Options{Addr: netip.IPv4Unspecified(), Port: port, ReuseAddr: true}, v+1<<19)
				require.NoError(t, tab.Connect(w, netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, 1}), 1), exact))
				socks = append(socks, w)
			}
			socks = append(socks, s)
		}
		for _, s := range socks {
			require.NoError(t, tab.Close(s))
			if v := s.Value(); v < len(closedAt) {
				closedAt[v].Store(epoch.Add(1))
			}
		}
		next += 3000
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d rounds", next/3000)
	assert.Zero(t, bad.Load())
	require.NoError(t, tab.Verify())
	assert.Equal(t, 23, tab.Len())
}
