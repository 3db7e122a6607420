package demux_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// seededTable makes a table with the given flow seed and random source,
// binds an SO_REUSEPORT group of n sockets (values 0..n-1, in join order)
// on 0.0.0.0:443 and three bind(0) sockets, and returns it with the
// ephemeral ports it chose.
func seededTable(t *testing.T, cfg demux.Config, flowSeed uint64, src rand.Source, n int) (*demux.Table[int], []uint16) {
	t.Helper()
	cfg.FlowSeed, cfg.Rand = flowSeed, src
	tab, err := demux.New[int](cfg)
	require.NoError(t, err)
	for i := range n {
		_, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 443, ReusePort: true}, i)
		require.NoError(t, err)
	}
	var ports []uint16
	for range 3 {
		s, err := tab.Bind(demux.Options{Addr: netip.IPv4Unspecified()}, -1)
		require.NoError(t, err)
		ports = append(ports, s.LocalAddr().Port())
	}
	return tab, ports
}

// picks returns the group member (its value) that each of 2000 flows goes to.
func picks(tab *demux.Table[int]) []int {
	dst := netip.MustParseAddrPort("10.0.0.1:443")
	out := make([]int, 2000)
	for i := range out {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}), uint16(1024+i))
		_, out[i] = tab.Lookup(src, dst, 1)
	}
	return out
}

// TestFlowSeed: tables that share FlowSeed but not their random source send
// every flow to the same group member, and still choose different ephemeral
// ports; without FlowSeed, their flows spread differently.
func TestFlowSeed(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		cfg := st.Table
		a, portsA := seededTable(t, cfg, 0x5eed, rand.NewPCG(1, 2), 5)
		b, portsB := seededTable(t, cfg, 0x5eed, rand.NewPCG(3, 4), 5)
		assert.Equal(t, picks(a), picks(b), "same flow seed, different members")
		assert.NotEqual(t, portsA, portsB, "the flow seed made the ephemeral ports predictable")

		c, _ := seededTable(t, cfg, 0, rand.NewPCG(1, 2), 5)
		d, _ := seededTable(t, cfg, 0, rand.NewPCG(3, 4), 5)
		assert.NotEqual(t, picks(c), picks(d), "random flow seeds agree")

		// FlowSeed replaces the drawn seed without shifting the random
		// stream: the same source gives the same ephemeral ports with or
		// without it.
		_, portsE := seededTable(t, cfg, 0, rand.NewPCG(1, 2), 5)
		assert.Equal(t, portsA, portsE, "FlowSeed changed the ephemeral ports")
	}
	// Both storages hash flows alike.
	a, _ := seededTable(t, demux.Config{}, 0x5eed, rand.NewPCG(1, 2), 5)
	b, _ := seededTable(t, demux.Config{Slots: 256}, 0x5eed, rand.NewPCG(3, 4), 5)
	assert.Equal(t, picks(a), picks(b), "the storages spread flows differently")
}
