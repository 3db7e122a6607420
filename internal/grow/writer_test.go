package grow

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// writer drives an Engine the way package demux's writes do, for tests
// that need sockets through connects and closes: each write holds its
// port's lock, each state of a socket is a new entry (set as the socket's
// current one before it is published), and entries are ordered by one
// counter with demux's rules (lookup.Order).
type writer struct {
	t   testing.TB
	g   *Engine
	seq atomic.Uint64
}

// wsock is one socket of a writer.
type wsock struct {
	sk *lookup.Socket
	// addr and v6only are what the socket was bound with, which a
	// disconnect of a wildcard socket binds again.
	addr   netip.Addr
	v6only bool
}

// bindOpts are the options of writer.bind beyond the address and port.
type bindOpts struct {
	v6only    bool
	reusePort bool
	owner     uint32
	device    int32
}

// newWriter returns a writer on a new engine with the given threshold
// (AlwaysScan, AlwaysIndex, or a hybrid threshold), seeded by seed.
func newWriter(t testing.TB, threshold int, seed uint64) *writer {
	r := rand.New(rand.NewPCG(seed, 0x9e37))
	g := New([4]uint64{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}, threshold, r.Uint64(), &bind.Occupancy{}, bind.NewRand(nil))
	return &writer{t: t, g: g}
}

// bind binds a new socket to addr:port with SO_REUSEADDR (the engine
// checks no conflict on Link, and the tests want every socket they bind).
func (w *writer) bind(addr netip.Addr, port uint16, o bindOpts) *wsock {
	l, err := ipv6.Bind(addr, o.v6only, int(o.device), nil)
	require.NoError(w.t, err)
	flags := l.Flags | lookup.ReuseAddr
	if o.reusePort {
		flags |= lookup.ReusePort
	}
	s := &wsock{sk: new(lookup.Socket), addr: addr, v6only: o.v6only}
	e := &lookup.Entry{Face: lookup.Face{Port: port, Flags: flags, V4: l.V4, V6: l.V6, Device: int32(l.Device),
		Ref: lookup.Ref{Sock: s.sk}}, Owner: o.owner}
	if e.Device == 0 {
		e.Device = o.device
	}
	pr := w.g.LockPort(port)
	defer w.g.Unlock(pr)
	e.Seq = w.seq.Add(1)
	s.sk.Bound, s.sk.BindSeq = e.Seq, e.Seq
	s.sk.Cur.Store(e)
	w.g.Link(pr, e)
	return s
}

// connect connects s to peer from src (for a wildcard socket; the
// unspecified address of the peer's family keeps an IPv4 wildcard). It
// returns ipv6.Connect's error, leaving s as it was.
func (w *writer) connect(s *wsock, peer netip.AddrPort, src netip.Addr) error {
	old := s.sk.Cur.Load()
	pr := w.g.LockPort(old.Port)
	defer w.g.Unlock(pr)
	l, p, err := ipv6.Connect(ipv6.LocalOf(old), int(old.Device), peer, src, nil)
	if err != nil {
		return err
	}
	e := l.Connected(old, p)
	lookup.Order(e, old, &w.seq)
	w.replace(pr, s, old, e)
	return nil
}

// disconnect disconnects s: a wildcard socket gets its wildcard back and
// leaves the 4-tuple hash, a specific one keeps its place there.
func (w *writer) disconnect(s *wsock) {
	old := s.sk.Cur.Load()
	pr := w.g.LockPort(old.Port)
	defer w.g.Unlock(pr)
	e := &lookup.Entry{Face: lookup.Face{Port: old.Port, Flags: old.Flags &^ (lookup.Connected | lookup.Hash4), Ref: old.Ref},
		Owner: old.Owner}
	l := ipv6.LocalOf(old)
	wild := s.addr.IsUnspecified()
	if wild {
		var err error
		l, err = ipv6.Bind(s.addr, s.v6only, 0, nil)
		require.NoError(w.t, err)
	}
	l.SetOn(e)
	if e.Flags == old.Flags && e.V4 == old.V4 && e.V6 == old.V6 && old.Device == 0 {
		return
	}
	if e.Key() != old.Key() {
		s.sk.BindSeq = w.seq.Add(1)
	}
	if wild {
		s.sk.ForgetFirst4()
	}
	e.Seq = s.sk.BindSeq
	w.replace(pr, s, old, e)
}

// replace publishes e in place of old, joining an unconnected ReusePort e
// to its group.
func (w *writer) replace(pr *Port, s *wsock, old, e *lookup.Entry) {
	join := e.Has(lookup.ReusePort) && !e.Has(lookup.Connected)
	if join {
		e.Group = w.g.GroupOf(pr, e)
	}
	s.sk.Cur.Store(e)
	s.sk.Pass(old, e)
	if join {
		e.Group.Add(e)
	}
	w.g.Replace(pr, old, e)
}

// close unlinks s.
func (w *writer) close(s *wsock) {
	e := s.sk.Cur.Load()
	pr := w.g.LockPort(e.Port)
	defer w.g.Unlock(pr)
	w.g.Unlink(pr, e)
	s.sk.Closed.Store(true)
}

// verify fails the test if the engine's structures disagree.
func (w *writer) verify(msgAndArgs ...any) {
	w.t.Helper()
	var errs []string
	w.g.Verify(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
	require.Empty(w.t, errs, msgAndArgs...)
}

// lookup returns the socket Lookup gives the datagram from src to dst on
// interface ifindex, and its path; nil for none or an undeliverable one.
func (w *writer) lookup(src, dst netip.AddrPort, ifindex int) (*lookup.Socket, lookup.Path) {
	var q lookup.Query
	if !q.Init(src, dst, ifindex) {
		return nil, lookup.Primary
	}
	r, p := w.g.Lookup(&q)
	return sockOf(r), p
}

// lookup4 is lookup through Lookup4, for IPv4 datagrams.
func (w *writer) lookup4(src, dst netip.AddrPort, ifindex int) (*lookup.Socket, lookup.Path) {
	var q lookup.Query
	r, p, _ := w.g.Lookup4(src, dst, ifindex, &q)
	return sockOf(r), p
}
