package grow

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

// The sockets of the shared 4-tuple tests: bound to local:sharedPort, they
// connect to peer or other.
const sharedPort = 5300

var (
	sharedLocal = netip.MustParseAddr("10.0.0.1")
	sharedPeer  = netip.MustParseAddrPort("192.0.2.1:53")
	sharedOther = netip.MustParseAddrPort("192.0.2.2:53")
	sharedDst   = netip.AddrPortFrom(sharedLocal, sharedPort)
)

// TestSharedTuple holds sockets that share a 4-tuple, where the newest
// first connect wins whatever the order of the binds, so that a scan of
// the port that stopped at its first 4-tuple match would answer wrongly:
// the chain's mark must say that a 4-tuple is shared while one is, and
// only then (Verify checks the mark against the count of shared keys).
// The sockets are bound so that the loser comes first on the port's
// chain. Lookup and Lookup4 must both answer right, on every rule.
func TestSharedTuple(t *testing.T) {
	type env struct {
		t    *testing.T
		w    *writer
		a, b *wsock
	}
	connect := func(e env, s *wsock, to netip.AddrPort) {
		require.NoError(e.t, e.w.connect(s, to, sharedLocal))
	}
	// both connects a, then b, to the peer: b's first connect is the later.
	both := func(e env) {
		connect(e, e.a, sharedPeer)
		connect(e, e.b, sharedPeer)
	}
	cases := []struct {
		name   string
		run    func(e env) // a and b are bound, b first
		want   string      // receiver of peer → local after run
		marked bool        // whether the chain is marked after run
	}{
		{"the later first connect wins", func(e env) {
			both(e)
		}, "B", true},
		{"the earlier first connect loses after a reconnect", func(e env) {
			both(e)
			connect(e, e.a, sharedOther)
			connect(e, e.a, sharedPeer)
		}, "B", true},
		{"the winner's close leaves the other", func(e env) {
			both(e)
			e.w.close(e.b)
		}, "A", false},
		{"the loser's close leaves the winner", func(e env) {
			both(e)
			e.w.close(e.a)
		}, "B", false},
		{"the winner's disconnect leaves the other", func(e env) {
			both(e)
			e.w.disconnect(e.b)
		}, "A", false},
		{"a move to another peer unshares", func(e env) {
			connect(e, e.b, sharedPeer)
			connect(e, e.a, sharedPeer)
			connect(e, e.a, sharedOther)
		}, "B", false},
	}
	for _, th := range thresholds {
		for _, c := range cases {
			t.Run(th.name+"/"+c.name, func(t *testing.T) {
				w := newWriter(t, th.threshold, 1)
				b := w.bind(sharedLocal, sharedPort, bindOpts{})
				a := w.bind(sharedLocal, sharedPort, bindOpts{})
				c.run(env{t, w, a, b})
				want := map[string]*lookup.Socket{"A": a.sk, "B": b.sk}[c.want]
				got, _ := w.lookup(sharedPeer, sharedDst, 1)
				assert.Same(t, want, got, "Lookup")
				got, _ = w.lookup4(sharedPeer, sharedDst, 1)
				assert.Same(t, want, got, "Lookup4")
				_, marked := w.g.port(sharedPort).list.LenMarked()
				assert.Equal(t, c.marked, marked, "the chain's mark")
				w.verify()
				// Closing every socket leaves nothing marked (a case
				// may have closed one already).
				for _, s := range []*wsock{a, b} {
					if !s.sk.Closed.Load() {
						w.close(s)
					}
				}
				_, marked = w.g.port(sharedPort).list.LenMarked()
				assert.False(t, marked, "the chain's mark with no socket")
				got, _ = w.lookup(sharedPeer, sharedDst, 1)
				assert.Nil(t, got)
				w.verify()
			})
		}
	}
}

// TestScanStopsOnlyWhenSafe: a scan of a short chain stops at its first
// 4-tuple match only if the chain was not marked, no move was under way
// when the scan began, and none happened since: else it scans the whole
// chain. The chain holds M, first, and W, which share a 4-tuple and which
// W wins; scan is called with the mark and the sequence count that a
// lookup could have read.
func TestScanStopsOnlyWhenSafe(t *testing.T) {
	w := newWriter(t, AlwaysScan, 2)
	ws := w.bind(sharedLocal, sharedPort, bindOpts{})
	m := w.bind(sharedLocal, sharedPort, bindOpts{})
	require.NoError(t, w.connect(m, sharedPeer, sharedLocal))
	require.NoError(t, w.connect(ws, sharedPeer, sharedLocal))
	slot := w.g.port(sharedPort)
	var q lookup.Query
	require.True(t, q.Init(sharedPeer, sharedDst, 1))
	scan := func(seq uint32, shared bool) *lookup.Socket {
		if e := w.g.scan(slot, &q, seq, shared); e != nil {
			return e.Ref.Sock
		}
		return nil
	}

	seq := slot.list.Seq.Peek()
	// Unmarked, and unmoved: M, the first 4-tuple match, where the
	// scan may stop (the mark is what keeps it from stopping here).
	require.Same(t, m.sk, scan(seq, false), "a scan that may stop")
	assert.Same(t, ws.sk, scan(seq, true), "a marked chain")

	pr := w.g.LockPort(sharedPort)
	pr.s.list.Seq.Begin()
	assert.Same(t, ws.sk, scan(slot.list.Seq.Peek(), false), "a move under way")
	pr.s.list.Seq.End()
	w.g.Unlock(pr)
	assert.Same(t, ws.sk, scan(seq, false), "a move since the count's read")
}

// TestSharedTupleRace looks up a datagram whose receiver stays put while
// another socket of its 4-tuple, ahead of it on the port's chain and
// beaten by it, moves to another peer and back. A scan that stopped at
// the mover's 4-tuple match while the port's chain said that no 4-tuple
// is shared (because the mark was cleared before the mover's old state
// left the chain, or set after its new one joined, or a move was under
// way or happened during the scan) would return the mover; every lookup
// must return the receiver.
func TestSharedTupleRace(t *testing.T) {
	const budget, least, most = 500 * time.Millisecond, 2000, 50000
	for _, th := range thresholds {
		for _, look := range []struct {
			name string
			find func(w *writer) *lookup.Socket
		}{
			{"Lookup", func(w *writer) *lookup.Socket { s, _ := w.lookup(sharedPeer, sharedDst, 1); return s }},
			{"Lookup4", func(w *writer) *lookup.Socket { s, _ := w.lookup4(sharedPeer, sharedDst, 1); return s }},
		} {
			t.Run(th.name+"/"+look.name, func(t *testing.T) {
				w := newWriter(t, th.threshold, 3)
				ws := w.bind(sharedLocal, sharedPort, bindOpts{})
				m := w.bind(sharedLocal, sharedPort, bindOpts{})
				require.NoError(t, w.connect(m, sharedPeer, sharedLocal))
				require.NoError(t, w.connect(ws, sharedPeer, sharedLocal))
				// Sockets on devices a lookup on interface 1 never
				// matches, ahead of the mover on the chain: a scan reads
				// them between the mark and the mover, which widens the
				// window in which the mover can join behind its back.
				// With them the port holds the hybrid threshold's 10.
				for i := range 8 {
					w.bind(sharedLocal, sharedPort, bindOpts{device: int32(100 + i)})
				}

				var moves, lookups, bad atomic.Int64
				var moveErr atomic.Value
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					for {
						select {
						case <-stop:
							return
						default:
						}
						for _, to := range []netip.AddrPort{sharedOther, sharedPeer} {
							if err := w.connect(m, to, sharedLocal); err != nil {
								moveErr.Store(err)
								bad.Add(1)
								return
							}
						}
						moves.Add(1)
					}
				}()
				deadline := time.Now().Add(budget)
				for (moves.Load() < least || time.Now().Before(deadline)) && moves.Load() < most && bad.Load() == 0 {
					if got := look.find(w); got != ws.sk {
						t.Errorf("lookup %d, after %d moves: got %v, not the receiver", lookups.Load(), moves.Load(), got)
						bad.Add(1)
					}
					lookups.Add(1)
				}
				close(stop)
				<-done
				t.Logf("%d lookups during %d moves", lookups.Load(), moves.Load())
				assert.Nil(t, moveErr.Load(), "a move failed")
				assert.Zero(t, bad.Load(), "a lookup missed the receiver, or a move failed")
				assert.GreaterOrEqual(t, moves.Load(), int64(100), "too few moves raced with the lookups")
				w.verify()
			})
		}
	}
}
