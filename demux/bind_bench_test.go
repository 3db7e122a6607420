package demux_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/udpdemux/udpdemux/demux"
)

// BenchmarkBind0 measures bind(0)+close in a 10 000-port range with 5000,
// 100, 10, 1 and 0 ports left free (scattered), for each algorithm.
func BenchmarkBind0(b *testing.B) {
	unchecked(b)
	const low, high = 40000, 49999
	for _, free := range []int{5000, 100, 10, 1, 0} {
		for _, algo := range algos {
			b.Run(fmt.Sprintf("free-%d/%v", free, algo), func(b *testing.B) {
				tab, err := demux.New[int](demux.Config{PortLow: low, PortHigh: high, Ephemeral: algo})
				if err != nil {
					b.Fatal(err)
				}
				ports := rand.New(rand.NewPCG(3, 4)).Perm(high - low + 1)
				for _, i := range ports[free:] {
					if _, err := tab.Bind(demux.Options{Addr: any4, Port: uint16(low + i)}, 0); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				fails := 0
				for b.Loop() {
					s, err := tab.Bind(demux.Options{Addr: any4}, 0)
					if err != nil {
						fails++
						continue
					}
					tab.Close(s)
				}
				if (fails > 0) != (free == 0) {
					b.Fatalf("%d failures with %d free ports", fails, free)
				}
			})
		}
	}
}

// BenchmarkBindLongChain measures an explicit bind+close on a port that
// already holds n sockets on distinct addresses.
func BenchmarkBindLongChain(b *testing.B) {
	unchecked(b)
	for _, n := range []int{10, 100000, 1000000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			tab := onPort443(b, 65536, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s, err := tab.Bind(demux.Options{Addr: addrN(n + i%1000), Port: 443}, i)
				if err != nil {
					b.Fatal(err)
				}
				tab.Close(s)
			}
		})
	}
}

// BenchmarkWrites measures the three writes of a socket's life, bind to an
// explicit port, connect and close, on a port that already holds n
// sockets, in each storage: the writes that take every kind of port and
// index lock.
func BenchmarkWrites(b *testing.B) {
	unchecked(b)
	for _, st := range []struct {
		name  string
		slots int
	}{{"grow", 0}, {"fixed", 65536}} {
		for _, n := range []int{1, 1000} {
			b.Run(fmt.Sprintf("%s/%d", st.name, n), func(b *testing.B) {
				tab := onPort443(b, st.slots, n)
				peer := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), 5000)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					s, err := tab.Bind(demux.Options{Addr: addrN(n + i%1000), Port: 443}, i)
					if err != nil {
						b.Fatal(err)
					}
					if err := tab.Connect(s, peer, netip.Addr{}); err != nil {
						b.Fatal(err)
					}
					tab.Close(s)
				}
			})
		}
	}
}

// onPort443 returns a table of the given slots (0: the growing storage)
// that holds n sockets on port 443, at addrN(0) to addrN(n-1).
func onPort443(b *testing.B, slots, n int) *demux.Table[int] {
	tab, err := demux.New[int](demux.Config{Slots: slots})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := tab.Bind(demux.Options{Addr: addrN(i), Port: 443}, i); err != nil {
			b.Fatal(err)
		}
	}
	return tab
}
