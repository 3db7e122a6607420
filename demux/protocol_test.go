package demux_test

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// These tests check the lock-free protocol between writers and lookups
// where a socket changes while it is being looked up, which
// TestConcurrentStress (unchanged sockets only) cannot see: a socket that
// connect moves from the wildcard secondary slot to an address's slot must
// be found throughout; a multicast lookup yields each socket once; a handle
// that a lookup returns is complete. Each runs for a bounded time and stops
// early once it has seen enough lookups race with the move.

// protocolConfigs are the configurations the protocol tests run on, each
// for protocolBudget: of demuxtest.Configs, the default one, Linux's fixed
// slots at their size on a small machine, and the two-phase strategy,
// which always searches the secondary slots.
var protocolConfigs = demuxtest.Named("grow/Hybrid/default", "fixed4096/Hybrid/default", "fixed256/TwoPhase")

// Phases of the moving socket, as its mover publishes them.
const (
	phaseUnconnected = iota // bound to the wildcard address
	phaseConnecting         // Connect may be under way
	phaseConnected          // connected to the peer, with the local address
	phaseClosing            // Close may be under way
)

// moverState is one published state of the moving socket; a new value is
// published for every change, so that a reader can compare two loads.
type moverState struct {
	gen   int
	s     *demux.Socket[string]
	phase int
}

// moveRace runs one mover against lookups. The mover binds a wildcard
// socket on a port, connects it to a peer with a local address (which moves
// it from the wildcard secondary slot to the local address's), and closes
// it, over and over, publishing each state in cur after the operation that
// makes it true and before the one that ends it. Before connecting it waits
// until a reader is in the middle of a lookup that began in the unconnected
// state, so that connects land inside lookups however the threads are
// scheduled.
type moveRace struct {
	cur      atomic.Pointer[moverState]
	inLookup atomic.Int64 // the generation a reader is looking up in, unconnected, or 0
	raced    atomic.Int64 // lookups that began unconnected and ended with Connect called
	lookups  atomic.Int64
	bad      atomic.Int64
	firstBad atomic.Value
}

// report records a failure; the run stops at the first.
func (r *moveRace) report(format string, args ...any) {
	r.bad.Add(1)
	r.firstBad.CompareAndSwap(nil, fmt.Sprintf(format, args...))
}

// begin is what a reader calls before its lookup: it returns the state
// then, and tells the mover that a lookup is under way in it.
func (r *moveRace) begin() *moverState {
	st := r.cur.Load()
	if st != nil && st.phase == phaseUnconnected {
		r.inLookup.Store(int64(st.gen))
	}
	return st
}

// end is what a reader calls after its lookup, with what begin returned: it
// returns the state now, and whether the mover was open throughout (the
// same generation, not closing), so that the lookup must have found it.
func (r *moveRace) end(before *moverState) (*moverState, bool) {
	after := r.cur.Load()
	r.inLookup.Store(0)
	r.lookups.Add(1)
	if before == nil || after.gen != before.gen || after.phase == phaseClosing {
		return after, false
	}
	if before.phase == phaseUnconnected && after.phase != phaseUnconnected {
		r.raced.Add(1)
	}
	return after, true
}

// move is the mover's loop; it returns when stop is closed.
func (r *moveRace) move(t *testing.T, tbl *demux.Table[string], port uint16, peer netip.AddrPort, local netip.Addr, stop <-chan struct{}) {
	for gen := 1; ; gen++ {
		select {
		case <-stop:
			return
		default:
		}
		s, err := tbl.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: port, ReuseAddr: true}, "mover")
		if err != nil {
			t.Errorf("bind the mover: %v", err)
			return
		}
		r.cur.Store(&moverState{gen: gen, s: s, phase: phaseUnconnected})
		// Wait (a bounded time: readers may have stopped) until a lookup
		// is under way.
		for wait := time.Now().Add(5 * time.Millisecond); r.inLookup.Load() != int64(gen) && time.Now().Before(wait); {
			runtime.Gosched()
		}
		r.cur.Store(&moverState{gen: gen, s: s, phase: phaseConnecting})
		if err := tbl.Connect(s, peer, local); err != nil {
			t.Errorf("connect the mover: %v", err)
			return
		}
		r.cur.Store(&moverState{gen: gen, s: s, phase: phaseConnected})
		// Let that lookup finish before closing, so that it is checked.
		for wait := time.Now().Add(5 * time.Millisecond); r.inLookup.Load() == int64(gen) && time.Now().Before(wait); {
			runtime.Gosched()
		}
		r.cur.Store(&moverState{gen: gen, s: s, phase: phaseClosing})
		if err := tbl.Close(s); err != nil {
			t.Errorf("close the mover: %v", err)
			return
		}
	}
}

// run runs move and readers until d has passed, enough lookups have raced
// with a connect, or a failure was reported. On a loaded machine few
// lookups may race in d; then it runs on, up to 4d, until least have.
func (r *moveRace) run(t *testing.T, d time.Duration, least, enough int64, move func(stop <-chan struct{}), read func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		move(stop)
	}()
	start := time.Now()
	going := func() bool {
		n := r.raced.Load()
		since := time.Since(start)
		return (since < d || n < least && since < 4*d) && n < enough && r.bad.Load() == 0 && !t.Failed()
	}
	readers := max(runtime.GOMAXPROCS(0)-1, 1)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for going() {
				read()
			}
		}()
	}
	for going() {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

// moveTable makes a table for the move tests: fillers sockets bound to
// local:port on devices a lookup on interface 1 never matches, and
// connected more of them, connected to peer from there. They keep the port
// above the hybrid threshold, so lookups take the indexes. In the fixed
// tables they also make the search of local's secondary slot long, which
// widens the window in which a socket can move behind a lookup's back. In
// the growing tables the unconnected ones lengthen no search: each is
// keyed by its device, and a lookup on interface 1 reads only the address
// keys of no device and of device 1. The connected ones are classes of the
// 4-tuple key (which has no device), scored right after the search reads
// that key and before it reads the wildcard's, so they do widen the window
// of a socket that connects to peer from local; scoring that comes after
// both keys a move crosses are read widens nothing (see grow's
// TestSearchSeesEveryMove).
func moveTable(t *testing.T, cfg demux.Config, local netip.Addr, port uint16, peer netip.AddrPort, fillers, connected int) *demux.Table[string] {
	return moveTableAt(t, cfg, local, local, port, peer, fillers, connected)
}

// moveTableAt is moveTable with the fillers bound to fillAt.
func moveTableAt(t *testing.T, cfg demux.Config, local, fillAt netip.Addr, port uint16, peer netip.AddrPort, fillers, connected int) *demux.Table[string] {
	tbl, err := demux.New[string](cfg)
	require.NoError(t, err)
	for i := range fillers + connected {
		s, err := tbl.Bind(demux.Options{Addr: fillAt, Port: port, ReuseAddr: true, Device: 100 + i}, "filler")
		require.NoError(t, err)
		if i >= fillers {
			require.NoError(t, tbl.Connect(s, peer, netip.Addr{}))
		}
	}
	return tbl
}

// addWildFillers binds n more fillers to the wildcard address on port and
// connects each, without a source address (it keeps the wildcard), to a
// peer of its own that no lookup comes from. They are classes of the
// wildcard's key of no device, which the growing tables' general search
// scores one by one: fillers that differ by device are keys of their own
// there, which a lookup on interface 1 does not read, and so leave it
// short.
func addWildFillers(t *testing.T, tbl *demux.Table[string], port uint16, n int) {
	for i := range n {
		s, err := tbl.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: port, ReuseAddr: true}, "filler")
		require.NoError(t, err)
		other := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 53)
		require.NoError(t, tbl.Connect(s, other, netip.IPv4Unspecified()))
	}
}

// protocolBudget bounds each configuration's run of a protocol test.
func protocolBudget() time.Duration {
	if testing.Short() {
		return 300 * time.Millisecond
	}
	return 500 * time.Millisecond
}

// TestConnectMoveNeverMissed: a wildcard socket that connects, and so moves from
// the wildcard secondary slot to its new local address's slot, receives a
// datagram from its peer to that address both before and after; a lookup
// that runs while it moves must find it. It fails if the lookup does not
// search again when a socket may have crossed between the slots it read.
func TestConnectMoveNeverMissed(t *testing.T) {
	testConnectMove(t, local1, 64, 0, 1, wildFillers)
}

// TestConnectMoveNeverMissedOneClass is TestConnectMoveNeverMissed with
// the fillers bound to another address: every key the lookup reads holds
// one class at most, so the growing tables' IPv4 path settles the lookup
// without the general search, and must itself notice the move and
// search again. A lookup can miss only in a short stretch of its own
// search: without the check, this test caught the miss after 92, 609 and
// 791 connects in three runs, and not in one run of 2 000. So on the
// growing tables it runs until 20 000 lookups have raced a connect; the
// fixed slots, which have no such path, run the usual budget.
func TestConnectMoveNeverMissedOneClass(t *testing.T) {
	testConnectMove(t, netip.MustParseAddr("10.0.0.2"), 64, 0, 1, growingLong)
}

// TestConnectMoveNeverMissedBatch is TestConnectMoveNeverMissed for
// LookupBatch, with a batch of one datagram many times, so that the move
// can fall between the stages of its search. The growing tables search
// the 4-tuple index last but the wildcard; connected fillers make that
// search long.
func TestConnectMoveNeverMissedBatch(t *testing.T) {
	testConnectMove(t, local1, 0, 64, 16)
}

// TestConnectMoveNeverMissedBatchOneClass is
// TestConnectMoveNeverMissedOneClass for LookupBatch: with the growing
// tables, the IPv4 batch path (grow.Engine.LookupBatch4).
func TestConnectMoveNeverMissedBatchOneClass(t *testing.T) {
	testConnectMove(t, netip.MustParseAddr("10.0.0.2"), 64, 0, 16, growingLong)
}

// TestConnectMoveNeverMissedBatchMixed is TestConnectMoveNeverMissedBatch
// with an IPv6 datagram at the end of each batch, which puts the batch on
// the growing tables' general batch path (grow.Engine.LookupBatch); no
// socket receives it.
func TestConnectMoveNeverMissedBatchMixed(t *testing.T) {
	testConnectMove(t, local1, 0, 64, 16, mixedBatch)
}

// local1 is the address the moving socket connects from.
var local1 = netip.MustParseAddr("10.0.0.1")

// How testConnectMove runs, beyond its defaults.
type moveMode int

const (
	// mixedBatch adds an IPv6 datagram to each batch.
	mixedBatch moveMode = iota
	// growingLong runs on the growing tables 20 000 races long, on the
	// fixed slots as usual.
	growingLong
	// wildFillers adds 64 fillers that make the wildcard's key long (see
	// addWildFillers).
	wildFillers
)

// testConnectMove runs the move race with fillers bound to fillAt, one
// datagram at a time or in batches of batch, in the given modes.
func testConnectMove(t *testing.T, fillAt netip.Addr, fillers, connected, batch int, modes ...moveMode) {
	const port = 4000
	local := local1
	peer := netip.MustParseAddrPort("192.0.2.7:53")
	dst := netip.AddrPortFrom(local, port)
	mixed, long := slices.Contains(modes, mixedBatch), slices.Contains(modes, growingLong)
	ds := make([]demux.Datagram, batch)
	for i := range ds {
		ds[i] = demux.Datagram{Src: peer, Dst: dst, Ifindex: 1}
	}
	if mixed {
		ds = append(ds, demux.Datagram{Src: netip.MustParseAddrPort("[2001:db8::7]:53"), Dst: netip.AddrPortFrom(netip.IPv6Loopback(), port), Ifindex: 1})
	}
	for _, c := range protocolConfigs {
		budget, enough := protocolBudget(), int64(2000)
		if long && c.Table.Slots == 0 {
			budget, enough = 8*budget, 20000
		}
		t.Run(c.Name, func(t *testing.T) {
			tbl := moveTableAt(t, c.Table, local, fillAt, port, peer, fillers, connected)
			if slices.Contains(modes, wildFillers) {
				addWildFillers(t, tbl, port, 64)
			}
			var r moveRace
			read := func() {
				got := make([]*demux.Socket[string], len(ds))
				before := r.begin()
				if batch > 1 {
					tbl.LookupBatch(ds, got)
				} else {
					got[0], _ = tbl.Lookup(peer, dst, 1)
				}
				after, open := r.end(before)
				if mixed {
					if got[batch] != nil {
						r.report("the IPv6 datagram went to %v", got[batch])
					}
					got = got[:batch]
				}
				// Open throughout, unconnected or connected, the mover
				// receives the datagram, and nothing else does.
				for i, s := range got {
					if open && s != before.s {
						r.report("generation %d, phase %d then %d, datagram %d: got %v", before.gen, before.phase, after.phase, i, s)
					}
				}
			}
			move := func(stop <-chan struct{}) { r.move(t, tbl, port, peer, local, stop) }
			r.run(t, budget, 20, enough, move, read)
			t.Logf("%d lookups, %d of them raced with a connect; %d generations", r.lookups.Load(), r.raced.Load(), r.cur.Load().gen)
			assert.Zero(t, r.bad.Load(), "the moving socket was missed; first: %v", r.firstBad.Load())
			assert.Positive(t, r.raced.Load(), "no lookup raced with a connect: the test checked nothing")
			require.NoError(t, tbl.Verify())
		})
	}
}

// TestMulticastMoveOnceEach checks multicast lookups while a socket moves
// between secondary slots. With a multicast destination, the sockets bound
// to it and to the wildcard address are yielded exactly once each, and the
// moving socket while it is unconnected (it leaves the wildcard slot on
// connect, which makes a lookup search again). With the destination the
// moving socket connects from (LookupMulticast matches by address, as for
// a directed broadcast), the moving socket is yielded exactly once in both
// states, so a lookup that misses it as it crosses slots fails.
func TestMulticastMoveOnceEach(t *testing.T) {
	const port = 4001
	local := netip.MustParseAddr("10.0.0.1")
	group := netip.MustParseAddr("224.1.2.3")
	peer := netip.MustParseAddrPort("192.0.2.7:53")
	for _, c := range protocolConfigs {
		t.Run(c.Name, func(t *testing.T) {
			tbl := moveTable(t, c.Table, local, port, peer, 64, 0)
			stable := map[netip.Addr][]*demux.Socket[string]{}
			for _, a := range []netip.Addr{local, group, netip.IPv4Unspecified()} {
				s, err := tbl.Bind(demux.Options{Addr: a, Port: port, ReuseAddr: true}, "stable "+a.String())
				require.NoError(t, err)
				stable[a] = []*demux.Socket[string]{s}
			}
			wild := stable[netip.IPv4Unspecified()][0]
			stable[group] = append(stable[group], wild)
			stable[local] = append(stable[local], wild)
			var r moveRace
			var k atomic.Uint64
			read := func() {
				to := local
				if k.Add(1)%2 == 0 {
					to = group
				}
				seen := map[*demux.Socket[string]]int{}
				before := r.begin()
				tbl.LookupMulticast(peer, netip.AddrPortFrom(to, port), 1, func(s *demux.Socket[string], _ string) bool {
					seen[s]++
					return true
				})
				after, open := r.end(before)
				for s, n := range seen {
					if n != 1 {
						r.report("to %v: %v yielded %d times", to, s.Value(), n)
					}
				}
				for _, s := range stable[to] {
					if seen[s] == 0 {
						r.report("to %v: unchanged %v missed", to, s.Value())
					}
				}
				// The mover matches the group only until it connects, and
				// its local address in both states.
				if open && (to == local || after.phase == phaseUnconnected) && seen[before.s] == 0 {
					r.report("to %v: mover missed, generation %d, phase %d then %d", to, before.gen, before.phase, after.phase)
				}
			}
			move := func(stop <-chan struct{}) { r.move(t, tbl, port, peer, local, stop) }
			r.run(t, protocolBudget(), 20, 2000, move, read)
			t.Logf("%d lookups, %d of them raced with a connect; %d generations", r.lookups.Load(), r.raced.Load(), r.cur.Load().gen)
			assert.Zero(t, r.bad.Load(), "wrong multicast receivers; first: %v", r.firstBad.Load())
			assert.Positive(t, r.raced.Load(), "no lookup raced with a connect: the test checked nothing")
			require.NoError(t, tbl.Verify())
		})
	}
}

// TestLookupHandleComplete: a handle that a lookup returns can be used at
// once, while its socket is being bound, connected or closed: its methods
// report one of the states it went through, and Connect and Close on it
// succeed or fail with EBADF, never crash. A lookup must never see a
// socket that a write has published only in part.
func TestLookupHandleComplete(t *testing.T) {
	const port = 5000
	local := netip.MustParseAddr("10.0.0.1")
	peer := netip.MustParseAddrPort("192.0.2.7:53")
	dst := netip.AddrPortFrom(local, port)
	wild := netip.AddrPortFrom(netip.IPv4Unspecified(), port)
	for _, c := range protocolConfigs {
		t.Run(c.Name, func(t *testing.T) {
			// No fillers: the chains are short, so most lookups find the
			// socket and the race with its publication is tried often.
			tbl := moveTable(t, c.Table, local, port, peer, 0, 0)
			var r moveRace
			var found atomic.Int64
			// use calls every method of s; it reports a panic as a failure
			// rather than crash the test binary.
			use := func(s *demux.Socket[string], write bool) {
				defer func() {
					if p := recover(); p != nil {
						r.report("a method of a handle a lookup returned panicked: %v\n%s", p, debug.Stack())
					}
				}()
				found.Add(1)
				r.raced.Add(1) // what the run counts: handles to check
				if a := s.LocalAddr(); a != wild && a != dst {
					r.report("LocalAddr %v", a)
				}
				if a := s.RemoteAddr(); a.IsValid() && a != peer {
					r.report("RemoteAddr %v", a)
				}
				if o := s.Options(); o.Port != port || o.Device != 0 {
					r.report("Options %+v", o)
				}
				_, _ = s.Connected(), s.Closed()
				if s.Value() != "mover" {
					r.report("Value %q", s.Value())
				}
				if !write {
					return
				}
				if err := tbl.Connect(s, peer, local); err != nil && !errors.Is(err, syscall.EBADF) {
					r.report("Connect: %v", err)
				}
				if err := tbl.Close(s); err != nil && !errors.Is(err, syscall.EBADF) {
					r.report("Close: %v", err)
				}
			}
			var k atomic.Uint64
			read := func() {
				n := k.Add(1)
				write := n%8 == 0
				if n%2 == 0 {
					if s, _ := tbl.Lookup(peer, dst, 1); s != nil {
						use(s, write)
					}
					return
				}
				tbl.LookupMulticast(peer, dst, 1, func(s *demux.Socket[string], _ string) bool {
					use(s, write)
					return true
				})
			}
			// The mover binds, connects and closes; a reader may have
			// closed its socket already.
			move := func(stop <-chan struct{}) {
				for {
					select {
					case <-stop:
						return
					default:
					}
					s, err := tbl.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: port}, "mover")
					if err != nil {
						t.Errorf("bind: %v", err)
						return
					}
					if err := tbl.Connect(s, peer, local); err != nil && !errors.Is(err, syscall.EBADF) {
						t.Errorf("connect: %v", err)
						return
					}
					if err := tbl.Close(s); err != nil && !errors.Is(err, syscall.EBADF) {
						t.Errorf("close: %v", err)
						return
					}
				}
			}
			r.run(t, protocolBudget(), 20, math.MaxInt64, move, read)
			t.Logf("%d handles used", found.Load())
			assert.Zero(t, r.bad.Load(), "a handle a lookup returned was not usable; first: %v", r.firstBad.Load())
			assert.Positive(t, found.Load(), "no lookup found the socket: the test checked nothing")
			require.NoError(t, tbl.Verify())
		})
	}
}

// TestClosedMeansGone checks that Close marks a socket closed only once it
// has left the tables: a lookup that starts after Closed reports true never
// finds the socket.
func TestClosedMeansGone(t *testing.T) {
	const rounds = 5000
	dst := netip.MustParseAddrPort("10.0.0.1:5000")
	src := netip.MustParseAddrPort("192.0.2.7:53")
	for _, c := range protocolConfigs {
		t.Run(c.Name, func(t *testing.T) {
			tbl, err := demux.New[int](c.Table)
			require.NoError(t, err)
			closing := make(chan *demux.Socket[int])
			done := make(chan struct{})
			go func() {
				for s := range closing {
					_ = s.Close()
					done <- struct{}{}
				}
			}()
			defer close(closing)
			for i := range rounds {
				s, err := tbl.Bind(demux.Options{Addr: dst.Addr(), Port: dst.Port()}, i)
				require.NoError(t, err)
				closing <- s
				for !s.Closed() {
				}
				got, _ := tbl.Lookup(src, dst, 1)
				<-done
				require.NotEqual(t, s, got, "round %d: a lookup after Closed found the socket", i)
			}
		})
	}
}
