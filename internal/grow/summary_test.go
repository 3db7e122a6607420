package grow

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/ipv6"
	"github.com/udpdemux/udpdemux/lookup"
)

// TestReplaceRecountsSummary: a move (Replace) that changes what decides a
// bind conflict recounts the socket in its port's bind-check summary, so
// that a bind check that reads the summary answers as a scan of the
// port's sockets would. Replace spares the summary's update only when
// the old and new states are of one conflict class (bind.SameClass),
// which most connects are; a wildcard socket that connects takes the
// source address as its own, and SO_BINDTODEVICE changes the device, and
// neither keeps its class (mutation summary-replace-skipped: a summary
// that still counted the old state refuses binds that the socket no
// longer conflicts with).
//
// The probes bind without SO_REUSEADDR, which every socket of the writer
// has, and so conflict with any socket whose address and device overlap
// theirs. Two-phase engines keep a summary from the port's first socket,
// hybrid ones past 64 sockets (fillers on another address make the port
// that long); one-phase ones keep none and scan, the reference.
func TestReplaceRecountsSummary(t *testing.T) {
	const port, fillers = 5500, 70
	local := netip.MustParseAddr("10.0.0.1")
	peer := netip.MustParseAddrPort("192.0.2.1:53")
	for _, tc := range []struct {
		name string
		// move binds a socket and moves it.
		move func(t *testing.T, w *writer)
		// probes are binds to check, by address and device, with
		// whether they conflict after move.
		probes []summaryProbe
	}{
		{"a wildcard connects from an address", func(t *testing.T, w *writer) {
			s := w.bind(netip.IPv4Unspecified(), port, bindOpts{})
			require.NoError(t, w.connect(s, peer, local))
		}, []summaryProbe{{"10.0.0.1", 0, true}, {"10.0.0.2", 0, false}}},
		{"a wildcard connects and disconnects", func(t *testing.T, w *writer) {
			s := w.bind(netip.IPv4Unspecified(), port, bindOpts{})
			require.NoError(t, w.connect(s, peer, local))
			w.disconnect(s)
		}, []summaryProbe{{"10.0.0.1", 0, true}, {"10.0.0.2", 0, true}}},
		{"an address socket connects, keeping its class", func(t *testing.T, w *writer) {
			s := w.bind(local, port, bindOpts{})
			require.NoError(t, w.connect(s, peer, netip.Addr{}))
		}, []summaryProbe{{"10.0.0.1", 0, true}, {"10.0.0.2", 0, false}}},
		{"a socket binds to a device", func(t *testing.T, w *writer) {
			s := w.bind(local, port, bindOpts{})
			setDevice(w, s, 1)
		}, []summaryProbe{{"10.0.0.1", 1, true}, {"10.0.0.1", 2, false}}},
		{"a socket leaves its device", func(t *testing.T, w *writer) {
			s := w.bind(local, port, bindOpts{device: 1})
			setDevice(w, s, 0)
		}, []summaryProbe{{"10.0.0.1", 1, true}, {"10.0.0.1", 2, true}}},
	} {
		for _, th := range thresholds {
			t.Run(tc.name+"/"+th.name, func(t *testing.T) {
				w := newWriter(t, th.threshold, 12)
				for range fillers {
					w.bind(netip.MustParseAddr("10.0.0.9"), port, bindOpts{})
				}
				tc.move(t, w)
				for _, p := range tc.probes {
					n := probeEntry(t, port, p)
					pr := w.g.LockPort(port)
					inUse, indexed := w.g.InUse(pr, n)
					scanned := scanConflicts(pr, n)
					w.g.Unlock(pr)
					assert.Equal(t, th.threshold != AlwaysScan, indexed, "%v: read the summary", p)
					assert.Equal(t, p.conflicts, scanned, "%v: a scan of the port", p)
					assert.Equal(t, p.conflicts, inUse, "%v: InUse", p)
				}
				w.verify()
			})
		}
	}
}

// summaryProbe is a bind that TestReplaceRecountsSummary checks.
type summaryProbe struct {
	addr      string
	device    int32
	conflicts bool
}

func (p summaryProbe) String() string { return fmt.Sprintf("bind %s on device %d", p.addr, p.device) }

// probeEntry returns the entry of a bind of p without SO_REUSEADDR.
func probeEntry(t *testing.T, port uint16, p summaryProbe) *lookup.Entry {
	l, err := ipv6.Bind(netip.MustParseAddr(p.addr), false, int(p.device), nil)
	require.NoError(t, err)
	e := &lookup.Entry{Face: lookup.Face{Port: port, Flags: l.Flags, V4: l.V4, V6: l.V6, Device: int32(l.Device),
		Ref: lookup.Ref{Sock: new(lookup.Socket)}}}
	if e.Device == 0 {
		e.Device = p.device
	}
	return e
}

// scanConflicts is InUse by a scan of every socket on pr's port.
func scanConflicts(pr *Port, n *lookup.Entry) bool {
	for x := pr.s.list.First(); x != nil; x = x.Next.Load() {
		if bind.Conflicts(n, lookup.OfPrimary(x)) {
			return true
		}
	}
	return false
}

// setDevice binds s to device dev (0: none), as SO_BINDTODEVICE on an
// unconnected socket does: a new state in its old one's place.
func setDevice(w *writer, s *wsock, dev int32) {
	old := s.sk.Cur.Load()
	pr := w.g.LockPort(old.Port)
	defer w.g.Unlock(pr)
	e := &lookup.Entry{Face: old.Face, Owner: old.Owner, Peer4: old.Peer4}
	e.Device = dev
	w.replace(pr, s, old, e)
}
