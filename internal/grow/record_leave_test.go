package grow

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecordLeavesWithLastSocket: a port's record leaves its page's slot
// when the port's last socket does (or with the write that added none),
// so that the port costs nothing more, Sizes counts it out, and the next
// write on the port makes a fresh record. A record that stayed, marked
// dead, would be met by every later LockPort of the port, which would
// retry it for ever (mutation grow-record-kept): each case checks that it
// left before it binds on the port again, which would then hang. A neighbour port of the same
// page, which keeps a socket, keeps its record.
func TestRecordLeavesWithLastSocket(t *testing.T) {
	const port, neighbour = 5700, 5701
	local := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name string
		// empty leaves port with no socket, after a write on it.
		empty func(t *testing.T, w *writer)
	}{
		{"bind and close", func(t *testing.T, w *writer) {
			w.close(w.bind(local, port, bindOpts{}))
		}},
		{"bind, connect and close", func(t *testing.T, w *writer) {
			s := w.bind(netip.IPv4Unspecified(), port, bindOpts{})
			require.NoError(t, w.connect(s, netip.MustParseAddrPort("192.0.2.1:53"), local))
			w.close(s)
		}},
		{"two sockets, both closed", func(t *testing.T, w *writer) {
			a, b := w.bind(local, port, bindOpts{}), w.bind(local, port, bindOpts{reusePort: true})
			w.close(a)
			w.close(b)
		}},
		{"a write that adds nothing", func(t *testing.T, w *writer) {
			// A bind that fails its conflict check locks the port and
			// unlocks it empty.
			w.g.Unlock(w.g.LockPort(port))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(t, 10, 14)
			kept := w.bind(local, neighbour, bindOpts{})
			tc.empty(t, w)
			pg := w.g.pages[port>>8].Load()
			require.NotNil(t, pg, "the port's page")
			require.Nil(t, pg.recs[port&255].Load(), "the empty port's record")
			require.NotNil(t, pg.recs[neighbour&255].Load(), "the neighbour's record")
			records, _, _, _, _, _ := w.g.Sizes()
			require.Equal(t, 1, records, "ports with a record")
			w.verify()

			// The port takes a socket again, under a record of its own.
			s := w.bind(local, port, bindOpts{})
			pr := pg.recs[port&255].Load()
			require.NotNil(t, pr, "the port's new record")
			assert.False(t, pr.dead)
			got, _ := w.lookup(netip.MustParseAddrPort("192.0.2.1:53"), netip.AddrPortFrom(local, port), 1)
			assert.Same(t, s.sk, got)
			w.close(kept)
			w.verify()
		})
	}
}
