package bind

import (
	"maps"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/lookup"
)

// randomEntry returns an entry with attributes drawn from small sets, so
// that classes repeat and every kind of address, flag and device meets
// every other.
func randomEntry(r *rand.Rand) *lookup.Entry {
	e := &lookup.Entry{Face: lookup.Face{Port: 53, Device: int32(r.IntN(3)), Ref: lookup.Ref{Sock: new(lookup.Socket)}}, Owner: uint32(r.IntN(2))}
	if r.IntN(2) == 0 {
		e.Flags |= lookup.ReuseAddr
	}
	if r.IntN(2) == 0 {
		e.Flags |= lookup.ReusePort
	}
	v4s := []uint32{0, 10<<24 | 1, 10<<24 | 2, 127<<24 | 6}
	v6s := []lookup.Addr16{{}, {Hi: 0x20010db8 << 32, Lo: 1}, {Hi: 0x20010db8 << 32, Lo: 2}}
	switch r.IntN(5) {
	case 0: // IPv4
		e.V4 = v4s[r.IntN(len(v4s))]
		e.V6 = lookup.Map4(e.V4)
		e.Flags |= lookup.HasV4
	case 1: // IPv6, v4-mapped
		e.V4 = v4s[r.IntN(len(v4s))]
		e.V6 = lookup.Map4(e.V4)
		e.Flags |= lookup.Is6 | lookup.HasV4
	case 2: // "::", dual-stack or IPv6-only
		e.Flags |= lookup.Is6 | lookup.HasV6
		if r.IntN(2) == 0 {
			e.Flags |= lookup.V6Only
		} else {
			e.Flags |= lookup.HasV4
		}
	case 3: // specific IPv6: IPv6-only, the placeholder as its IPv4 side
		e.V6 = v6s[1+r.IntN(2)]
		e.V4 = 127<<24 | 6
		e.Flags |= lookup.Is6 | lookup.HasV6 | lookup.V6Only
	default: // dual-stack connected to an IPv6 peer: holds the placeholder
		e.V6 = v6s[1+r.IntN(2)]
		e.V4 = 127<<24 | 6
		e.Flags |= lookup.Is6 | lookup.HasV6 | lookup.Connected
	}
	return e
}

// byKey is a summary's classes key by key, whatever form it keeps them in.
type byKey struct {
	V4 map[uint32]map[attrs]int
	V6 map[lookup.Addr16]map[attrs]int
}

// countByKey counts the classes of bound as a summary should hold them.
func countByKey(bound []*lookup.Entry) byKey {
	want := byKey{map[uint32]map[attrs]int{}, map[lookup.Addr16]map[attrs]int{}}
	for _, e := range bound {
		if !e.Has(lookup.Is6 | lookup.V6Only) {
			if want.V4[e.V4] == nil {
				want.V4[e.V4] = map[attrs]int{}
			}
			want.V4[e.V4][attrsOf(e)]++
		}
		if e.Has(lookup.Is6) && !e.V6.IsMapped() {
			if want.V6[e.V6] == nil {
				want.V6[e.V6] = map[attrs]int{}
			}
			want.V6[e.V6][attrsOf(e)]++
		}
	}
	return want
}

// summed is what s counts, key by key, with the device of each socket
// counted in a device's summary put back. It checks that s.devs.all counts
// what the devices' summaries count, devices left out.
func summed(t *testing.T, s *Summary) byKey {
	out := byKey{s.byV4.all(attrsOf4), s.byV6.all(attrsOf6)}
	if s.devs == nil {
		return out
	}
	require.NotEmpty(t, s.devs.by, "a device summary with no device")
	all := byKey{map[uint32]map[attrs]int{}, map[lookup.Addr16]map[attrs]int{}}
	for dev, one := range s.devs.by {
		require.Nil(t, one.devs)
		addAll(all.V4, one.byV4.all(attrsOf4), 0)
		addAll(all.V6, one.byV6.all(attrsOf6), 0)
		addAll(out.V4, one.byV4.all(attrsOf4), dev)
		addAll(out.V6, one.byV6.all(attrsOf6), dev)
	}
	require.Empty(t, cmp.Diff(all, byKey{s.devs.all.byV4.all(attrsOf4), s.devs.all.byV6.all(attrsOf6)},
		cmp.AllowUnexported(attrs{}, lookup.Addr16{})), "the count of every device's sockets")
	return out
}

// addAll adds the counts of src to dst, each class's device set to dev.
func addAll[K comparable](dst, src map[K]map[attrs]int, dev int32) {
	for k, cs := range src {
		if dst[k] == nil {
			dst[k] = map[attrs]int{}
		}
		for a, n := range cs {
			a.dev = dev
			dst[k][a] += n
		}
	}
}

// TestSummaryMatchesScan: the summary's answer for every new socket is the
// answer of a scan of every bound socket with Conflicts, and it holds
// each socket's attributes exactly, under its keys. Small
// populations, so that the answer often hangs on one class; sockets are
// added and removed at random.
func TestSummaryMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for round := range 3000 {
		var s Summary
		var bound []*lookup.Entry
		for step := range 12 {
			if len(bound) > 0 && r.IntN(3) == 0 {
				i := r.IntN(len(bound))
				s.Add(bound[i], -1)
				bound = append(bound[:i], bound[i+1:]...)
			} else if len(bound) < 6 {
				e := randomEntry(r)
				s.Add(e, 1)
				bound = append(bound, e)
			}
			require.Empty(t, cmp.Diff(countByKey(bound), summed(t, &s), cmp.AllowUnexported(attrs{}, lookup.Addr16{})),
				"round %d step %d: the summary's classes", round, step)
			for range 8 {
				n := randomEntry(r)
				want := false
				for _, e := range bound {
					want = want || Conflicts(n, e)
				}
				require.Equal(t, want, s.InUse(n), "round %d step %d: new %+v among %d", round, step, n.Face, len(bound))
			}
		}
		for _, e := range bound {
			s.Add(e, -1)
		}
		require.True(t, s.byV4.empty())
		require.True(t, s.byV6.empty())
		require.Zero(t, s.wild.first.n)
		require.Empty(t, s.wild.more)
		require.Nil(t, s.devs)
	}
}

// TestSummaryShrinks checks that a port's bind-check summary gives back the
// room of the sockets it no longer holds: Go maps keep the room of their
// largest size, so without a rebuild a port that once held 200 000 sockets
// kept some 12 bytes (IPv4) or 34 bytes (IPv6) for each until it emptied.
func TestSummaryShrinks(t *testing.T) {
	const peak, keep = 200_000, 1_000
	cases := []struct {
		name string
		addr func(i int) *lookup.Entry
	}{
		{"IPv4", func(i int) *lookup.Entry {
			e := &lookup.Entry{Face: lookup.Face{Port: 53, Flags: lookup.HasV4 | lookup.ReuseAddr, V4: 10<<24 | uint32(i)}}
			e.V6 = lookup.Map4(e.V4)
			return e
		}},
		{"IPv6", func(i int) *lookup.Entry {
			return &lookup.Entry{Face: lookup.Face{Port: 53, Flags: lookup.Is6 | lookup.HasV6 | lookup.V6Only | lookup.ReuseAddr,
				V4: 127<<24 | 6, V6: lookup.Addr16{Hi: 0x20010db8 << 32, Lo: uint64(i)}}}
		}},
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			es := make([]*lookup.Entry, peak)
			for i := range es {
				es[i] = c.addr(i + 1)
			}
			// The summary that only ever held keep sockets, and the one
			// that held peak and is back to keep.
			small := new(Summary)
			for _, e := range es[:keep] {
				small.Add(e, 1)
			}
			base := heap()
			s := new(Summary)
			for _, e := range es {
				s.Add(e, 1)
			}
			grown := heap()
			for _, e := range es[keep:] {
				s.Add(e, -1)
			}
			after := heap()
			require.Equal(t, summed(t, small), summed(t, s), "the shrunk summary counts what the small one does")
			kept := float64(after) - float64(base)
			held := float64(grown) - float64(base)
			t.Logf("%s summary of %d sockets: %.0f bytes; back to %d: %.0f bytes kept", c.name, peak, held, keep, kept)
			require.Greater(t, held, float64(peak)*8, "the full summary is not as large as it must be: the measure is wrong")
			require.Less(t, kept, held/10, "the summary kept the room of the sockets that left")
			runtime.KeepAlive(small)
			runtime.KeepAlive(s)
			runtime.KeepAlive(es)
		})
	}
}

// TestSummaryKeepsDevicesApart: sockets of one address that differ only by
// device are counted apart, by device, so that a bind reads the classes of
// its own device and of no device, not one class per device; a bind to no
// device reads them all through one count with the devices left out. When
// the last socket bound to a device goes, so does the devices' count.
func TestSummaryKeepsDevicesApart(t *testing.T) {
	const devices = 2000
	for _, tc := range []struct {
		name  string
		flags uint8
		v4    uint32
		v6    lookup.Addr16
	}{
		{"IPv4 wildcard", lookup.HasV4, 0, lookup.Map4(0)},
		{"IPv4 address", lookup.HasV4, 10<<24 | 1, lookup.Map4(10<<24 | 1)},
		{"IPv6 wildcard", lookup.Is6 | lookup.HasV4 | lookup.HasV6, 0, lookup.Wild6},
		{"IPv6 address", lookup.Is6 | lookup.HasV6 | lookup.V6Only, 127<<24 | 6, lookup.Addr16{Hi: 0x20010db8 << 32, Lo: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entry := func(dev int32) *lookup.Entry {
				return &lookup.Entry{Face: lookup.Face{Port: 53, Flags: tc.flags | lookup.ReuseAddr, V4: tc.v4, V6: tc.v6, Device: dev}}
			}
			classes := func(s *Summary) int {
				n := len(s.wild.more) + len(s.byV4.more) + len(s.byV6.more) + len(s.byV4.cells) + len(s.byV6.cells)
				if s.wild.first.n > 0 {
					n++
				}
				return n
			}
			var s Summary
			s.Add(entry(0), 1)
			var byDev []*lookup.Entry
			for i := range devices {
				e := entry(int32(i + 1))
				require.False(t, s.InUse(e))
				s.Add(e, 1)
				byDev = append(byDev, e)
			}
			assert.LessOrEqual(t, classes(&s), 3, "classes a bind to no device reads besides the devices' own")
			require.NotNil(t, s.devs)
			assert.Len(t, s.devs.by, devices)
			assert.LessOrEqual(t, classes(&s.devs.all), 3, "classes of every device's sockets, devices left out")
			for _, e := range byDev {
				s.Add(e, -1)
			}
			assert.Nil(t, s.devs)
		})
	}
}

// TestSummaryEqual: two summaries are Equal exactly when they count the
// same attributes the same number of times, whatever order the sockets
// came and went in: grow's Verify rebuilds each port's summary from its
// sockets and compares.
func TestSummaryEqual(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	census := func(es []*lookup.Entry) map[attrs]int {
		m := map[attrs]int{}
		for _, e := range es {
			m[attrsOf(e)]++
		}
		return m
	}
	v4 := func(addr uint32, dev int32) *lookup.Entry {
		return &lookup.Entry{Face: lookup.Face{Port: 53, Flags: lookup.HasV4, V4: addr, V6: lookup.Map4(addr), Device: dev}}
	}
	v6 := func(lo uint64, dev int32) *lookup.Entry {
		return &lookup.Entry{Face: lookup.Face{Port: 53, Flags: lookup.Is6 | lookup.HasV6 | lookup.V6Only, V4: 127<<24 | 6,
			V6: lookup.Addr16{Hi: 0x20010db8 << 32, Lo: lo}, Device: dev}}
	}
	// Pairs that differ in one thing, which only one part of a summary
	// holds.
	for _, tc := range []struct {
		name string
		a, b *lookup.Entry
	}{
		{"IPv4 address", v4(10<<24|1, 0), v4(10<<24|2, 0)},
		{"IPv6 address", v6(1, 0), v6(2, 0)},
		{"IPv4 address, on a device", v4(10<<24|1, 3), v4(10<<24|2, 3)},
		{"device", v4(10<<24|1, 3), v4(10<<24|1, 4)},
	} {
		var sa, sb Summary
		sa.Add(tc.a, 1)
		sb.Add(tc.b, 1)
		assert.False(t, sa.Equal(&sb), tc.name)
		sb.Add(tc.b, -1)
		sb.Add(tc.a, 1)
		assert.True(t, sa.Equal(&sb), tc.name+", made alike")
	}
	for round := range 2000 {
		var a, b []*lookup.Entry
		for range r.IntN(5) {
			a = append(a, randomEntry(r))
		}
		switch r.IntN(3) {
		case 0: // the same sockets, in another order
			b = append(b, a...)
			r.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
		case 1: // one socket more
			b = append(append(b, a...), randomEntry(r))
		default:
			for range r.IntN(5) {
				b = append(b, randomEntry(r))
			}
		}
		var sa, sb Summary
		for _, e := range a {
			sa.Add(e, 1)
		}
		// b's summary also counts, then uncounts, sockets it does not keep.
		extra := randomEntry(r)
		sb.Add(extra, 1)
		for _, e := range b {
			sb.Add(e, 1)
		}
		sb.Add(extra, -1)
		want := maps.Equal(census(a), census(b))
		require.Equal(t, want, sa.Equal(&sb), "round %d: %d and %d sockets", round, len(a), len(b))
		require.Equal(t, want, sb.Equal(&sa), "round %d, the other way", round)
	}
}
