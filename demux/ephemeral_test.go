package demux_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

var (
	lo4   = netip.MustParseAddr("127.0.0.1")
	any4  = netip.IPv4Unspecified()
	any6  = netip.IPv6Unspecified()
	algos = []demux.Ephemeral{demux.EphemeralIndex, demux.EphemeralBitmap, demux.EphemeralLinear}
)

// chiSquareP returns the p-value of a chi-square statistic x with k
// degrees of freedom (Wilson–Hilferty approximation, accurate for large k).
func chiSquareP(x float64, k int) float64 {
	kf := float64(k)
	z := (math.Cbrt(x/kf) - (1 - 2/(9*kf))) / math.Sqrt(2/(9*kf))
	return 0.5 * math.Erfc(z/math.Sqrt2)
}

// uniformityP draws n ports with choose and returns the chi-square p-value
// of the counts over the ports in free, and how many consecutive draws
// were sequential (p, p+1).
func uniformityP(t *testing.T, n int, free map[uint16]bool, choose func() uint16) (float64, int) {
	counts := make(map[uint16]int, len(free))
	seq := 0
	var last uint16
	for i := range n {
		p := choose()
		require.True(t, free[p], "draw %d: port %d is not free", i, p)
		counts[p]++
		if i > 0 && p == last+1 {
			seq++
		}
		last = p
	}
	exp := float64(n) / float64(len(free))
	x := 0.0
	for p := range free {
		d := float64(counts[p]) - exp
		x += d * d / exp
	}
	return chiSquareP(x, len(free)-1), seq
}

// fillScattered binds a socket on every port of [low, high] except keep
// free ones chosen at random, and returns the free set.
func fillScattered(t *testing.T, tab *demux.Table[int], low, high uint16, freeN int, r *rand.Rand) map[uint16]bool {
	ports := make([]uint16, 0, int(high-low)+1)
	for p := int(low); p <= int(high); p++ {
		ports = append(ports, uint16(p))
	}
	r.Shuffle(len(ports), func(i, j int) { ports[i], ports[j] = ports[j], ports[i] })
	free := map[uint16]bool{}
	for i, p := range ports {
		if i < freeN {
			free[p] = true
			continue
		}
		_, err := tab.Bind(demux.Options{Addr: any4, Port: p}, 0)
		require.NoError(t, err)
	}
	return free
}

// TestEphemeralUniform: bind(0) chooses uniformly among the free ports, on
// an empty range and on one 90 % in use; and the test can tell a skewed
// chooser from a uniform one.
func TestEphemeralUniform(t *testing.T) {
	const low, high = 40000, 44999 // 5000 ports
	n := 100000
	if testing.Short() {
		n = 20000
	}
	for _, tc := range []struct {
		name  string
		freeN int
	}{{"empty", 5000}, {"90% used", 500}} {
		t.Run(tc.name, func(t *testing.T) {
			// The default generator, ChaCha8, with a fixed seed so that
			// the test is deterministic.
			src := rand.NewChaCha8([32]byte{1, 2, 3})
			tab, err := demux.New[int](demux.Config{PortLow: low, PortHigh: high, Slots: 1024, Rand: src})
			require.NoError(t, err)
			free := fillScattered(t, tab, low, high, tc.freeN, rand.New(rand.NewPCG(7, 8)))
			p, seq := uniformityP(t, n, free, func() uint16 {
				s, err := tab.Bind(demux.Options{Addr: any4}, 0)
				require.NoError(t, err)
				require.NoError(t, tab.Close(s))
				return s.LocalAddr().Port()
			})
			t.Logf("chi-square p = %.4f, sequential pairs %d of %d", p, seq, n)
			assert.Greater(t, p, 0.001, "bind(0) is not uniform")
			// Uniform draws are sequential with probability 1/free.
			assert.Less(t, seq, 3*n/len(free)+10, "consecutive choices look sequential")

			// The same test on a chooser that prefers the lower ports
			// (the smaller of two uniform draws) must fail, or the test
			// above proves nothing.
			list := make([]uint16, 0, len(free))
			for q := range free {
				list = append(list, q)
			}
			r := rand.New(rand.NewPCG(1, 1))
			skewed, _ := uniformityP(t, n, free, func() uint16 {
				a, b := list[r.IntN(len(list))], list[r.IntN(len(list))]
				return min(a, b)
			})
			assert.Less(t, skewed, 0.001, "the uniformity test cannot see a skewed chooser")
		})
	}
}

// TestEphemeralRules: every algorithm keeps to the range, never picks a
// reserved port, never picks a conflicting port, and fails with EADDRINUSE
// leaving the table unchanged when no port is left.
func TestEphemeralRules(t *testing.T) {
	for _, algo := range algos {
		t.Run(algo.String(), func(t *testing.T) {
			const low, high = 50000, 50063
			reserved := []uint16{50001, 50010, 50063}
			tab, err := demux.New[int](demux.Config{PortLow: low, PortHigh: high, ReservedPorts: reserved, Ephemeral: algo, Slots: 256})
			require.NoError(t, err)
			// A reserved port still takes an explicit bind.
			_, err = tab.Bind(demux.Options{Addr: lo4, Port: 50010}, 0)
			require.NoError(t, err)
			seen := map[uint16]bool{}
			for i := 0; ; i++ {
				s, err := tab.Bind(demux.Options{Addr: any4}, i)
				if err != nil {
					require.ErrorIs(t, err, syscall.EADDRINUSE)
					break
				}
				p := s.LocalAddr().Port()
				require.True(t, p >= low && p <= high, "port %d out of range", p)
				require.NotContains(t, reserved, p)
				require.False(t, seen[p], "port %d chosen twice", p)
				seen[p] = true
			}
			assert.Len(t, seen, 64-3)
			before := tab.Len()
			_, err = tab.Bind(demux.Options{Addr: any6}, 0)
			assert.ErrorIs(t, err, syscall.EADDRINUSE, "dual-stack :: conflicts with every 0.0.0.0")
			assert.Equal(t, before, tab.Len())
			require.NoError(t, tab.Verify())
			// An IPv6-only socket does not conflict with IPv4 ones:
			// the ports can be shared.
			s, err := tab.Bind(demux.Options{Addr: any6, V6Only: true}, 0)
			require.NoError(t, err)
			assert.True(t, seen[s.LocalAddr().Port()])
			require.NoError(t, tab.Verify())
		})
	}
}

// TestEphemeralSharesWhenFull: when every port holds a socket, bind(0)
// still finds a port that the new socket can share.
func TestEphemeralSharesWhenFull(t *testing.T) {
	for _, algo := range algos {
		t.Run(algo.String(), func(t *testing.T) {
			tab, err := demux.New[int](demux.Config{PortLow: 50000, PortHigh: 50031, Ephemeral: algo, Slots: 256})
			require.NoError(t, err)
			for p := uint16(50000); p <= 50031; p++ {
				_, err := tab.Bind(demux.Options{Addr: lo4, Port: p, ReuseAddr: p != 50017}, 0)
				require.NoError(t, err)
			}
			s, err := tab.Bind(demux.Options{Addr: lo4, ReuseAddr: true}, 0)
			require.NoError(t, err)
			assert.NotEqual(t, uint16(50017), s.LocalAddr().Port())
			s2, err := tab.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2")}, 0)
			require.NoError(t, err, "another address shares any port")
			assert.NotZero(t, s2.LocalAddr().Port())
			require.NoError(t, tab.Verify())
		})
	}
}

// TestEphemeralReproducer is the reproducer of Linux's 2009 bind(0) thread
// (DESIGN.md, "Background"), shortened: 64 goroutines bind(0) in a loop in
// a nearly full range and close the sockets on the two neighbouring ports.
// No port may be handed out twice, and the tables must be consistent after.
func TestEphemeralReproducer(t *testing.T) {
	for _, st := range demuxtest.Storages() {
		for _, algo := range algos {
			t.Run(st.Name+"/"+algo.String(), func(t *testing.T) {
				cfg := st.Table
				cfg.Ephemeral = algo
				ephemeralReproducer(t, cfg)
			})
		}
	}
}

func ephemeralReproducer(t *testing.T, cfg demux.Config) {
	const low, high = 40000, 40511
	cfg.PortLow, cfg.PortHigh = low, high
	tab, err := demux.New[int](cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	owner := map[uint16]*demux.Socket[int]{}
	iters := 150
	if testing.Short() {
		iters = 30
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iters {
				s, err := tab.Bind(demux.Options{Addr: any4}, g*iters+i)
				if errors.Is(err, syscall.EADDRINUSE) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				p := s.LocalAddr().Port()
				mu.Lock()
				if o := owner[p]; o != nil {
					mu.Unlock()
					errs <- fmt.Errorf("port %d handed out twice", p)
					return
				}
				owner[p] = s
				var victims []*demux.Socket[int]
				for _, q := range []uint16{p - 1, p + 1} {
					if v := owner[q]; v != nil {
						delete(owner, q)
						victims = append(victims, v)
					}
				}
				mu.Unlock()
				for _, v := range victims {
					if err := tab.Close(v); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.NoError(t, tab.Verify())
	assert.Equal(t, len(owner), tab.Len())
}
