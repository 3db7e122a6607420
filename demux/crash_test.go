package demux_test

import (
	"io"
	mrand "math/rand/v2"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// TestNilInterfaceValue: a table of an interface type stores and returns a
// nil value like any other; a datagram reaching that socket must not panic.
func TestNilInterfaceValue(t *testing.T) {
	src := netip.MustParseAddrPort("192.0.2.1:1000")
	dst := netip.MustParseAddrPort("127.0.0.1:53")
	bcast := netip.MustParseAddrPort("255.255.255.255:53")
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				run  func(t *testing.T)
			}{
				{"any", func(t *testing.T) { checkNilValue[any](t, cfg, src, dst, bcast) }},
				{"io.Reader", func(t *testing.T) { checkNilValue[io.Reader](t, cfg, src, dst, bcast) }},
				{"error", func(t *testing.T) { checkNilValue[error](t, cfg, src, dst, bcast) }},
			} {
				t.Run(tc.name, tc.run)
			}
		})
	}
}

func checkNilValue[V any](t *testing.T, cfg demux.Config, src, dst, bcast netip.AddrPort) {
	tab, err := demux.New[V](cfg)
	require.NoError(t, err)
	var zero V
	s, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: dst.Port()}, zero)
	require.NoError(t, err)
	var got *demux.Socket[V]
	var v V
	require.NotPanics(t, func() { got, v = tab.Lookup(src, dst, 0) })
	assert.Same(t, s, got)
	assert.Nil(t, v)
	n := 0
	require.NotPanics(t, func() {
		tab.LookupMulticast(src, bcast, 0, func(s *demux.Socket[V], v V) bool {
			n++
			assert.Nil(t, v)
			return true
		})
	})
	assert.Equal(t, 1, n)
}

// constSource is a broken random source: it always returns the same value.
type constSource uint64

func (c constSource) Uint64() uint64 { return uint64(c) }

// TestBrokenRand: a source that always returns the same value must not make
// bind(0) spin, with any algorithm, on a range whose size is not a power
// of two; a typed-nil source is EINVAL, not a panic.
func TestBrokenRand(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  mrand.Source
	}{
		{"zero", constSource(0)},
		{"1<<63", constSource(1 << 63)},
		{"all ones", constSource(^uint64(0))},
	} {
		for _, eph := range []demux.Ephemeral{demux.EphemeralIndex, demux.EphemeralBitmap, demux.EphemeralLinear} {
			for _, st := range demuxtest.Storages() {
				t.Run(st.Name+"/"+tc.name+"/"+eph.String(), func(t *testing.T) {
					// 300 ports: Lemire's rejection threshold is not 0.
					cfg := st.Table
					cfg.Rand, cfg.Ephemeral, cfg.PortLow, cfg.PortHigh = tc.src, eph, 2000, 2299
					tab, err := demux.New[int](cfg)
					require.NoError(t, err)
					done := make(chan error, 1)
					go func() {
						ports := map[uint16]bool{}
						for range 300 {
							s, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified()}, 0)
							if err != nil {
								done <- err
								return
							}
							ports[s.LocalAddr().Port()] = true
						}
						if len(ports) != 300 {
							done <- assert.AnError
							return
						}
						_, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified()}, 0)
						done <- err
					}()
					select {
					case err := <-done:
						// Every port taken once, then the range is full.
						assert.ErrorIs(t, err, syscall.EADDRINUSE)
					case <-time.After(20 * time.Second):
						t.Fatal("bind(0) with a constant random source did not return")
					}
					require.NoError(t, tab.Verify())
				})
			}
		}
	}
	for _, src := range []mrand.Source{(*mrand.ChaCha8)(nil), (*mrand.PCG)(nil)} {
		var tab *demux.Table[int]
		var err error
		require.NotPanics(t, func() { tab, err = demux.New[int](demux.Config{Rand: src}) })
		assert.ErrorIs(t, err, syscall.EINVAL)
		assert.Nil(t, tab)
	}
}

// TestIfindexNotTruncated: an arrival interface that does not fit an int32
// must not alias the interface its low bits name.
func TestIfindexNotTruncated(t *testing.T) {
	src := netip.MustParseAddrPort("192.0.2.1:1000")
	dst := netip.MustParseAddrPort("127.0.0.1:53")
	for _, c := range demuxtest.Configs() {
		cfg := c.Table
		t.Run(c.Name, func(t *testing.T) {
			tab, err := demux.New[string](cfg)
			require.NoError(t, err)
			_, err = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 53, Device: 3, ReuseAddr: true}, "dev3")
			require.NoError(t, err)
			for _, tc := range []struct {
				ifindex int
				want    string
			}{
				{3, "dev3"},
				{1<<32 + 3, ""},
				{-(1 << 32) + 3, ""},
				{1 << 31, ""},
				{-1, ""},
			} {
				_, v := tab.Lookup(src, dst, tc.ifindex)
				assert.Equal(t, tc.want, v, "ifindex %d", tc.ifindex)
				var got []string
				tab.LookupMulticast(src, netip.MustParseAddrPort("255.255.255.255:53"), tc.ifindex, func(_ *demux.Socket[string], v string) bool {
					got = append(got, v)
					return true
				})
				if tc.want == "" {
					assert.Empty(t, got, "ifindex %d", tc.ifindex)
				} else {
					assert.Equal(t, []string{tc.want}, got, "ifindex %d", tc.ifindex)
				}
			}
		})
	}
}

// TestZeroSocket: the zero Socket belongs to no table; its methods report
// nothing and do not panic.
func TestZeroSocket(t *testing.T) {
	var s demux.Socket[int]
	require.NotPanics(t, func() {
		assert.Equal(t, netip.AddrPort{}, s.LocalAddr())
		assert.Equal(t, netip.AddrPort{}, s.RemoteAddr())
		assert.Equal(t, demux.Options{}, s.Options())
		assert.False(t, s.Connected())
		assert.False(t, s.Closed())
		assert.Zero(t, s.Value())
	})
}

// TestNilYield: LookupMulticast with a nil callback is a no-op.
func TestNilYield(t *testing.T) {
	tab, err := demux.New[int](demux.Config{})
	require.NoError(t, err)
	_, err = tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 53}, 1)
	require.NoError(t, err)
	require.NotPanics(t, func() {
		tab.LookupMulticast(netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("255.255.255.255:53"), 0, nil)
	})
}
