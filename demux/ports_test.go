package demux_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
	"github.com/udpdemux/udpdemux/internal/model"
)

// portWatcher records port events and checks that they alternate.
type portWatcher struct {
	mu     sync.Mutex
	inUse  map[uint16]bool
	events []string
	bad    []string
	veto   map[uint16]error
}

func newPortWatcher() *portWatcher {
	return &portWatcher{inUse: map[uint16]bool{}, veto: map[uint16]error{}}
}

func (w *portWatcher) hook(port uint16, inUse bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, fmt.Sprintf("%d %v", port, inUse))
	if inUse {
		if err := w.veto[port]; err != nil {
			return err
		}
	}
	if w.inUse[port] == inUse {
		w.bad = append(w.bad, fmt.Sprintf("port %d: event %v twice in a row", port, inUse))
	}
	if inUse {
		w.inUse[port] = true
	} else {
		delete(w.inUse, port)
	}
	return nil
}

func (w *portWatcher) ports() []uint16 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []uint16
	for p := range w.inUse {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (w *portWatcher) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := w.events
	w.events = nil
	return ev
}

// TestPortsAgainstModel runs the differential test's random operations
// and checks after every one that the port events, Ports and Sockets agree
// with the model's sockets. The generator runs the operations on a table of
// its own; they are then replayed, one at a time, on a table that has the
// port hook (replays are deterministic: same seed, same answers).
func TestPortsAgainstModel(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 600
	}
	for ci, c := range diffConfigs() {
		t.Run(c.Name, func(t *testing.T) {
			seed := *diffSeed + uint64(ci)
			gr, err := demuxtest.NewRunner(c, seed)
			require.NoError(t, err)
			ops, err := demuxtest.NewGenerator(gr, rand.NewPCG(seed, 0x9047)).Run(n)
			require.NoError(t, err)
			w := newPortWatcher()
			c.Table.OnPort = w.hook
			r, err := demuxtest.NewRunner(c, seed)
			require.NoError(t, err)
			tbl, m := r.Table(), r.Model()
			for i, o := range ops {
				require.NoError(t, r.Step(i, o), "op %d %v", i, o)
				var wantPorts []uint16
				var wantIDs []int
				snap := m.Snapshot()
				slices.SortStableFunc(snap, func(a, b model.Socket) int { return int(a.Local.Port()) - int(b.Local.Port()) })
				for _, s := range snap {
					wantIDs = append(wantIDs, s.ID)
					if p := s.Local.Port(); !slices.Contains(wantPorts, p) {
						wantPorts = append(wantPorts, p)
					}
				}
				require.Empty(t, cmp.Diff(wantPorts, slices.Collect(tbl.Ports())), "op %d %v: Ports (-model +table)", i, o)
				require.Empty(t, cmp.Diff(wantPorts, w.ports()), "op %d %v: ports in use by events (-model +events)", i, o)
				var gotIDs []int
				for s := range tbl.Sockets() {
					gotIDs = append(gotIDs, s.Value())
				}
				require.Empty(t, cmp.Diff(wantIDs, gotIDs), "op %d %v: Sockets, by port then bind order (-model +table)", i, o)
			}
			require.Empty(t, w.bad)
			require.NotEmpty(t, w.take(), "no port event at all")
		})
	}
}

// TestPortEventOrder checks which operations deliver events and that a
// lookup made from inside the hook does not find the socket yet (0→1) or
// any more (1→0).
func TestPortEventOrder(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		cfg := st.Table
		var tbl *demux.Table[string]
		var log []string
		lo := netip.MustParseAddr("127.0.0.1")
		peer := netip.MustParseAddrPort("127.0.0.9:999")
		cfg.OnPort = func(port uint16, inUse bool) error {
			s, _ := tbl.Lookup(peer, netip.AddrPortFrom(lo, port), 1)
			log = append(log, fmt.Sprintf("%d %v found=%v", port, inUse, s != nil))
			return nil
		}
		tbl, err := demux.New[string](cfg)
		require.NoError(t, err)
		a, err := tbl.Bind(demux.Options{Addr: lo, Port: 53, ReuseAddr: true}, "a")
		require.NoError(t, err)
		b, err := tbl.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 53, ReuseAddr: true}, "b")
		require.NoError(t, err)
		_, err = tbl.Bind(demux.Options{Addr: lo, Port: 53}, "conflict")
		require.ErrorIs(t, err, syscall.EADDRINUSE)
		require.NoError(t, tbl.Connect(b, peer, lo))
		require.NoError(t, tbl.Close(a))
		require.NoError(t, tbl.Close(b))
		require.ErrorIs(t, tbl.Close(b), syscall.EBADF)
		c, err := tbl.Bind(demux.Options{Addr: lo, Port: 53}, "c")
		require.NoError(t, err)
		require.NoError(t, tbl.Close(c))
		assert.Equal(t, []string{"53 true found=false", "53 false found=false", "53 true found=false", "53 false found=false"}, log)
	}
}

// TestPortEventPrecedesPublication races lookups against binds and closes
// on fresh ports: a lookup that finds an open socket must find its port
// announced. The hook dawdles before it records the port, so that a table
// which published first would be caught.
func TestPortEventPrecedesPublication(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		t.Run(st.Name, func(t *testing.T) { precedesPublication(t, st.Table) })
	}
}

func precedesPublication(t *testing.T, cfg demux.Config) {
	const ports = 64
	var told [ports]atomic.Bool
	var spin atomic.Int64
	base := uint16(20000)
	cfg.OnPort = func(port uint16, inUse bool) error {
		if inUse {
			for i := 0; i < 20000; i++ {
				spin.Add(1) // a few microseconds, without yielding the CPU
			}
		}
		told[port-base].Store(inUse)
		return nil
	}
	tbl, err := demux.New[int](cfg)
	require.NoError(t, err)
	lo := netip.MustParseAddr("127.0.0.1")
	src := netip.MustParseAddrPort("127.0.0.9:999")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var found, bad atomic.Int64
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := r; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				p := base + uint16(k%ports)
				s, _ := tbl.Lookup(src, netip.AddrPortFrom(lo, p), 1)
				if s == nil {
					continue
				}
				found.Add(1)
				// told is cleared after the socket is marked closed.
				if !told[p-base].Load() && !s.Closed() {
					bad.Add(1)
				}
			}
		}()
	}
	// Until the readers have found sockets often enough, within bounds.
	deadline := time.Now().Add(2 * time.Second)
	for round := 0; round < 200 && (found.Load() < 10000 || round < 3) && time.Now().Before(deadline); round++ {
		var open []*demux.Socket[int]
		for i := range ports {
			s, err := tbl.Bind(demux.Options{Addr: lo, Port: base + uint16(i)}, round)
			require.NoError(t, err)
			open = append(open, s)
		}
		for _, s := range open {
			require.NoError(t, tbl.Close(s))
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d lookups found a socket", found.Load())
	assert.Positive(t, found.Load())
	assert.Zero(t, bad.Load(), "lookups found a socket on a port not yet announced")
}

// TestPortEventVeto checks that a vetoed bind, explicit or bind(0), fails
// with the hook's error and leaves the table as it was.
func TestPortEventVeto(t *testing.T) {
	errVeto := errors.New("no kernel socket")
	for _, st := range demuxtest.Storages() {
		cfg := st.Table
		w := newPortWatcher()
		w.veto[53] = errVeto
		w.veto[50000] = errVeto
		cfg.OnPort = w.hook
		cfg.PortLow, cfg.PortHigh = 50000, 50000
		tbl, err := demux.New[string](cfg)
		require.NoError(t, err)
		_, err = tbl.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 54}, "other")
		require.NoError(t, err)
		before := slices.Collect(tbl.Sockets())
		src := netip.MustParseAddrPort("127.0.0.9:999")
		for _, port := range []uint16{53, 0} {
			_, err := tbl.Bind(demux.Options{Addr: netip.IPv6Unspecified(), Port: port}, "vetoed")
			require.ErrorIs(t, err, errVeto, "port %d", port)
			var oe *demux.OpError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "bind", oe.Op)
			assert.Contains(t, err.Error(), "udpdemux: bind")
			require.NoError(t, tbl.Verify())
			assert.Equal(t, 1, tbl.Len())
			assert.Equal(t, []uint16{54}, slices.Collect(tbl.Ports()))
			assert.Equal(t, before, slices.Collect(tbl.Sockets()))
			s, _ := tbl.Lookup(src, netip.MustParseAddrPort("127.0.0.1:53"), 1)
			assert.Nil(t, s)
		}
		assert.Equal(t, []string{"54 true", "53 true", "50000 true"}, w.take())
		// Once the hook agrees, the same binds succeed.
		delete(w.veto, 53)
		delete(w.veto, 50000)
		s, err := tbl.Bind(demux.Options{Addr: netip.IPv6Unspecified(), Port: 53}, "ok")
		require.NoError(t, err)
		s0, err := tbl.Bind(demux.Options{Addr: netip.IPv6Unspecified()}, "ok0")
		require.NoError(t, err)
		assert.Equal(t, uint16(50000), s0.LocalAddr().Port())
		got, _ := tbl.Lookup(src, netip.MustParseAddrPort("127.0.0.1:53"), 1)
		assert.Same(t, s, got)
		assert.Equal(t, []uint16{53, 54, 50000}, slices.Collect(tbl.Ports()))
		assert.Equal(t, []string{"53 true", "50000 true"}, w.take())
		require.Empty(t, w.bad)
	}
}

// TestSocketsConsistentPerPort keeps a port at 32 or 33 sockets at every
// instant (a writer binds a new socket before closing the oldest) while
// readers iterate: every iteration must see 32 or 33 on that port. A walk
// of the chain without the port's lock can miss the new socket, pushed in
// front of it, and the old one, unlinked behind it, and count 31.
func TestSocketsConsistentPerPort(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		t.Run(st.Name, func(t *testing.T) { socketsConsistentPerPort(t, st.Table) })
	}
}

func socketsConsistentPerPort(t *testing.T, cfg demux.Config) {
	tbl, err := demux.New[int](cfg)
	require.NoError(t, err)
	const port, other = 7000, 7256 // one primary slot of a 256-slot table
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}) }
	var fifo []*demux.Socket[int]
	next := 0
	bind := func(p uint16) *demux.Socket[int] {
		// The value carries the port: a socket's addresses are not
		// read here, only what the iteration yields.
		s, err := tbl.Bind(demux.Options{Addr: addr(next), Port: p}, int(p)<<32|next)
		require.NoError(t, err)
		next++
		return s
	}
	for range 32 {
		fifo = append(fifo, bind(port))
	}
	for range 5 {
		bind(other)
	}
	deadline := time.Now().Add(stressBudget(t, 300*time.Millisecond))
	var wg sync.WaitGroup
	var iters, bad atomic.Int64
	var first atomic.Value
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				counts := map[uint16]int{}
				seen := map[*demux.Socket[int]]bool{}
				last := uint16(0)
				for s := range tbl.Sockets() {
					p := uint16(s.Value() >> 32)
					if seen[s] || p < last {
						bad.Add(1)
						first.CompareAndSwap(nil, fmt.Sprintf("socket %d twice or out of port order", s.Value()))
					}
					seen[s], last = true, p
					counts[p]++
				}
				if c := counts[port]; c != 32 && c != 33 || counts[other] != 5 {
					bad.Add(1)
					first.CompareAndSwap(nil, fmt.Sprintf("counts %v", counts))
				}
				iters.Add(1)
			}
		}()
	}
	for time.Now().Before(deadline) {
		fifo = append(fifo, bind(port))
		require.NoError(t, tbl.Close(fifo[0]))
		fifo = fifo[1:]
	}
	wg.Wait()
	t.Logf("slots %d: %d iterations, %d binds", cfg.Slots, iters.Load(), next)
	assert.Positive(t, iters.Load())
	assert.Zero(t, bad.Load(), "inconsistent iterations; first: %v", first.Load())
}

// TestSocketsBodyMayUseTable checks that no lock is held while the loop
// body runs: it binds and closes on the port being iterated.
func TestSocketsBodyMayUseTable(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		t.Run(st.Name, func(t *testing.T) { socketsBodyMayUseTable(t, st.Table) })
	}
}

func socketsBodyMayUseTable(t *testing.T, cfg demux.Config) {
	tbl, err := demux.New[int](cfg)
	require.NoError(t, err)
	lo := netip.MustParseAddr("127.0.0.1")
	for i := range 3 {
		_, err := tbl.Bind(demux.Options{Addr: lo, Port: 53, ReuseAddr: true}, i)
		require.NoError(t, err)
	}
	done := make(chan []int)
	go func() {
		var vals []int
		for s := range tbl.Sockets() {
			vals = append(vals, s.Value())
			if s.Value() == 0 {
				_, err := tbl.Bind(demux.Options{Addr: lo, Port: 53, ReuseAddr: true}, 9)
				assert.NoError(t, err)
			}
			assert.NoError(t, tbl.Close(s))
			if s.Value() == 1 {
				break
			}
		}
		done <- vals
	}()
	select {
	case vals := <-done:
		assert.Equal(t, []int{0, 1}, vals, "the port was read once, before the body's bind; the loop stops at break")
	case <-time.After(5 * time.Second):
		t.Fatal("the loop body could not use the table: Sockets holds a lock while yielding")
	}
	var left []int
	for s := range tbl.Sockets() {
		left = append(left, s.Value())
	}
	assert.Equal(t, []int{2, 9}, left)
}
