package demux_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// mcastTable binds n wildcard ReuseAddr sockets on port 5353, in a table
// of configuration cfg.
func mcastTable(tb testing.TB, cfg demux.Config, n int) *demux.Table[int] {
	tab, err := demux.New[int](cfg)
	require.NoError(tb, err)
	for i := range n {
		_, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 5353, ReuseAddr: true}, i)
		require.NoError(tb, err)
	}
	return tab
}

var (
	mcastSrc = netip.MustParseAddrPort("192.0.2.1:5353")
	mcastDst = netip.MustParseAddrPort("224.0.0.251:5353")
)

// TestMulticastIterator: the iterator yields what the callback does, stops
// when the loop breaks, and allocates nothing, on either storage.
func TestMulticastIterator(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		t.Run(st.Name, func(t *testing.T) { multicastIterator(t, st.Table) })
	}
}

func multicastIterator(t *testing.T, cfg demux.Config) {
	tab := mcastTable(t, cfg, 5)
	var want, got []int
	tab.LookupMulticast(mcastSrc, mcastDst, 1, func(_ *demux.Socket[int], v int) bool { want = append(want, v); return true })
	for s, v := range tab.Multicast(mcastSrc, mcastDst, 1) {
		assert.Equal(t, v, s.Value())
		got = append(got, v)
	}
	assert.Len(t, want, 5)
	assert.Equal(t, want, got)
	n := 0
	for range tab.Multicast(mcastSrc, mcastDst, 1) {
		n++
		if n == 2 {
			break
		}
	}
	assert.Equal(t, 2, n)

	sum := 0
	allocs := testing.AllocsPerRun(1000, func() {
		for _, v := range tab.Multicast(mcastSrc, mcastDst, 1) {
			sum += v
		}
	})
	assert.Zero(t, allocs, "iterator")
	allocs = testing.AllocsPerRun(1000, func() {
		tab.LookupMulticast(mcastSrc, mcastDst, 1, func(_ *demux.Socket[int], v int) bool { sum += v; return true })
	})
	assert.Zero(t, allocs, "callback")
}

// BenchmarkMulticast compares the iterator with the callback.
func BenchmarkMulticast(b *testing.B) {
	tab := mcastTable(b, demux.Config{}, 8)
	b.Run("callback", func(b *testing.B) {
		b.ReportAllocs()
		sum := 0
		for b.Loop() {
			tab.LookupMulticast(mcastSrc, mcastDst, 1, func(_ *demux.Socket[int], v int) bool { sum += v; return true })
		}
	})
	b.Run("iterator", func(b *testing.B) {
		b.ReportAllocs()
		sum := 0
		for b.Loop() {
			for _, v := range tab.Multicast(mcastSrc, mcastDst, 1) {
				sum += v
			}
		}
	})
}
