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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestConcurrentStress runs binds, connects and closes on some ports while
// other goroutines look up sockets that never change: those must be found
// every time (a racing write shows the table before or after, never a
// mix). It is meant for -race; it runs for a bounded time, on each
// storage.
func TestConcurrentStress(t *testing.T) {
	for _, c := range demuxtest.Storages() {
		t.Run(c.Name, func(t *testing.T) {
			cfg := c.Table
			cfg.Threshold, cfg.PortLow, cfg.PortHigh = 4, 41000, 41063
			concurrentStress(t, cfg)
		})
	}
}

func concurrentStress(t *testing.T, cfg demux.Config) {
	tbl, err := demux.New[string](cfg)
	require.NoError(t, err)
	// One primary slot of a 256-slot table. port3 holds a stable wildcard
	// and at most one churning socket of each writer: it stays under the
	// threshold, so that the growing tables scan its chain, while the
	// other two are indexed.
	const port, port2, port3 = 7000, 7256, 7512
	type probe struct {
		src, dst netip.AddrPort
		ifindex  int
		want     *demux.Socket[string]
	}
	var probes []probe
	stranger := netip.MustParseAddrPort("10.0.0.1:5555")
	stranger6 := netip.MustParseAddrPort("[2001:db8::1]:5555")
	// Stable sockets: 16 specific IPv4 addresses with ReuseAddr (so that
	// churning wildcard sockets can share the port), an IPv6 one, a
	// device-bound one, a ReusePort group, and a wildcard on port2.
	for i := 1; i <= 16; i++ {
		a := netip.AddrFrom4([4]byte{127, 0, 0, byte(i)})
		s, err := tbl.Bind(demux.Options{Addr: a, Port: port, ReuseAddr: true}, fmt.Sprint("stable ", a))
		require.NoError(t, err)
		probes = append(probes, probe{stranger, netip.AddrPortFrom(a, port), 1, s})
	}
	s6, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr("::1"), Port: port, ReuseAddr: true}, "stable ::1")
	require.NoError(t, err)
	probes = append(probes, probe{stranger6, netip.AddrPortFrom(netip.MustParseAddr("::1"), port), 1, s6})
	sdev, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.1.1"), Port: port, ReuseAddr: true, Device: 3}, "stable dev")
	require.NoError(t, err)
	probes = append(probes, probe{stranger, netip.MustParseAddrPort("127.0.1.1:7000"), 3, sdev})
	var group []*demux.Socket[string]
	for i := range 3 {
		s, err := tbl.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.2.1"), Port: port, ReusePort: true, ReuseAddr: true}, fmt.Sprint("group ", i))
		require.NoError(t, err)
		group = append(group, s)
	}
	for p := range 8 {
		src := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), uint16(6000+p))
		dst := netip.MustParseAddrPort("127.0.2.1:7000")
		probes = append(probes, probe{src, dst, 1, group[tbl.ReusePortIndex(src, dst, len(group))]})
	}
	swild, err := tbl.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: port2, ReuseAddr: true}, "stable wildcard")
	require.NoError(t, err)
	probes = append(probes, probe{stranger, netip.MustParseAddrPort("127.0.0.200:7256"), 1, swild})
	swild3, err := tbl.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: port3, ReuseAddr: true}, "stable wildcard 3")
	require.NoError(t, err)
	short := probe{stranger, netip.MustParseAddrPort("127.0.0.200:7512"), 1, swild3}
	probes = append(probes, short)
	stable := tbl.Len()

	d := stressBudget(t, 2*time.Second)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	var misses, lookups, writes atomic.Int64
	var firstMiss atomic.Value
	// Readers.
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next, nextMulti := w, w // the probes, round robin
			for k := 0; time.Now().Before(deadline); k++ {
				// Every other lookup is port3's, whose chain is the
				// shortest: a reader is on a churning socket there
				// often as it is closed.
				p := short
				if k%2 == 1 {
					p = probes[next%len(probes)]
					next++
				}
				got, _ := tbl.Lookup(p.src, p.dst, p.ifindex)
				lookups.Add(1)
				if got != p.want {
					misses.Add(1)
					firstMiss.CompareAndSwap(nil, fmt.Sprintf("%v -> %v: got %v", p.src, p.dst, got))
				}
				if k%16 == 0 {
					p := probes[nextMulti%len(probes)]
					nextMulti++
					found := false
					tbl.LookupMulticast(p.src, p.dst, p.ifindex, func(s *demux.Socket[string], _ string) bool {
						found = found || s == p.want
						return true
					})
					if !found {
						misses.Add(1)
						firstMiss.CompareAndSwap(nil, fmt.Sprintf("multicast %v -> %v: missing %v", p.src, p.dst, p.want.Value()))
					}
				}
			}
		}()
	}
	// Writers: each owns its sockets and closes them before it ends.
	churnPeer := netip.MustParseAddrPort("10.9.9.9:1") // never a probe's source
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			var mine []*demux.Socket[string]
			var short *demux.Socket[string] // the writer's socket on port3
			for time.Now().Before(deadline) {
				if rng.IntN(4) == 0 { // bind or close on the short chain
					if short == nil {
						a := netip.AddrFrom4([4]byte{127, 0, 4, byte(w + 1)})
						s, err := tbl.Bind(demux.Options{Addr: a, Port: port3, ReuseAddr: true}, "churn 3")
						if err != nil {
							t.Errorf("bind %v: %v", a, err)
							return
						}
						short = s
					} else {
						if err := tbl.Close(short); err != nil {
							t.Errorf("close: %v", err)
							return
						}
						short = nil
					}
					writes.Add(1)
					continue
				}
				if len(mine) > 24 || (len(mine) > 0 && rng.IntN(3) == 0) {
					i := rng.IntN(len(mine))
					if err := tbl.Close(mine[i]); err != nil {
						t.Errorf("close: %v", err)
						return
					}
					mine = slices.Delete(mine, i, i+1)
					writes.Add(1)
					continue
				}
				var o demux.Options
				switch rng.IntN(6) {
				case 0: // another specific address on the busy port
					o = demux.Options{Addr: netip.AddrFrom4([4]byte{127, 0, 3, byte(rng.IntN(250) + 1)}), Port: port, ReuseAddr: true}
				case 5: // a stable socket's address and port, on a device no probe arrives on:
					// the growing tables' key of that address gains and loses a class
					o = demux.Options{Addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(rng.IntN(16) + 1)}), Port: port, ReuseAddr: true, Device: 2}
				case 1: // a wildcard that connects into a stable socket's bucket
					o = demux.Options{Addr: netip.IPv4Unspecified(), Port: port, ReuseAddr: true}
				case 2: // the same primary slot, other port
					o = demux.Options{Addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(rng.IntN(16) + 1)}), Port: port2, ReuseAddr: true}
				case 3: // dual-stack wildcard
					o = demux.Options{Addr: netip.IPv6Unspecified(), Port: port, ReuseAddr: true}
				default: // bind(0)
					o = demux.Options{Addr: netip.IPv4Unspecified()}
				}
				s, err := tbl.Bind(o, "churn")
				if err != nil {
					if !errors.Is(err, syscall.EADDRINUSE) {
						t.Errorf("bind %+v: %v", o, err)
						return
					}
					continue
				}
				writes.Add(1)
				mine = append(mine, s)
				if o.Addr.Unmap().IsUnspecified() && o.Port != 0 && rng.IntN(2) == 0 {
					local := netip.AddrFrom4([4]byte{127, 0, 0, byte(rng.IntN(16) + 1)})
					if err := tbl.Connect(s, churnPeer, local); err != nil {
						t.Errorf("connect %v: %v", s.LocalAddr(), err)
						return
					}
					writes.Add(1)
				}
			}
			if short != nil {
				mine = append(mine, short)
			}
			for _, s := range mine {
				if err := tbl.Close(s); err != nil {
					t.Errorf("close: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d lookups, %d writes in %v", lookups.Load(), writes.Load(), d)
	assert.Zero(t, misses.Load(), "lookups of unchanged sockets failed; first: %v", firstMiss.Load())
	assert.Positive(t, writes.Load())
	require.NoError(t, tbl.Verify())
	assert.Equal(t, stable, tbl.Len())
	for _, p := range probes {
		got, _ := tbl.Lookup(p.src, p.dst, p.ifindex)
		assert.Same(t, p.want, got, "%v -> %v", p.src, p.dst)
	}
}

// stressBudget bounds how long one subtest of a stress test runs: d, a
// quarter of it with -short, and never more than a fiftieth of the time
// left before -timeout ends the test binary. A stress test also stops on
// an operation count where it has one; what it must have done whatever
// the budget (rounds, races seen) it checks on its own.
func stressBudget(t *testing.T, d time.Duration) time.Duration {
	if testing.Short() {
		d /= 4
	}
	if end, ok := t.Deadline(); ok {
		d = min(d, time.Until(end)/50)
	}
	return d
}
