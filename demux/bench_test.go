package demux_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/udpdemux/udpdemux/demux"
)

var strategies = []demux.Strategy{demux.OnePhase, demux.TwoPhase, demux.Hybrid, growing}

// growing stands, in the benchmarks' strategy lists, for the default
// storage (demux.Config{}: growing tables, hybrid); the others use 65536
// fixed slots.
const growing = demux.Strategy(255)

func benchConfig(s demux.Strategy) demux.Config {
	if s == growing {
		return demux.Config{}
	}
	return demux.Config{Slots: 65536, Strategy: s}
}

// addr6N returns the n-th address of 2001:db8::/96.
func addr6N(i int) netip.Addr {
	b := [16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(i >> 24), 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)}
	return netip.AddrFrom16(b)
}

// buildTable binds n sockets, the i-th with options o(i), in a table of
// configuration cfg, and returns the destinations that datagrams to them
// use, in random order.
func buildTable(b testing.TB, cfg demux.Config, n int, o func(i int) (demux.Options, netip.AddrPort)) (*demux.Table[int], []netip.AddrPort) {
	t, err := demux.New[int](cfg)
	if err != nil {
		b.Fatal(err)
	}
	dsts := make([]netip.AddrPort, n)
	for i := range n {
		opts, dst := o(i)
		if _, err := t.Bind(opts, i); err != nil {
			b.Fatal(err)
		}
		dsts[i] = dst
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(n, func(i, j int) { dsts[i], dsts[j] = dsts[j], dsts[i] })
	return t, dsts
}

// samePortTable binds n sockets on port 53 at distinct IPv4 addresses
// (addrN).
func samePortTable(b testing.TB, cfg demux.Config, n int) (*demux.Table[int], []netip.AddrPort) {
	return buildTable(b, cfg, n, func(i int) (demux.Options, netip.AddrPort) {
		return demux.Options{Addr: addrN(i), Port: 53}, netip.AddrPortFrom(addrN(i), 53)
	})
}

// samePort6Table is samePortTable with IPv6 addresses.
func samePort6Table(b testing.TB, cfg demux.Config, n int) (*demux.Table[int], []netip.AddrPort) {
	return buildTable(b, cfg, n, func(i int) (demux.Options, netip.AddrPort) {
		return demux.Options{Addr: addr6N(i), Port: 53}, netip.AddrPortFrom(addr6N(i), 53)
	})
}

// distinctPortsTable binds n IPv4 wildcard sockets on distinct ports.
func distinctPortsTable(b testing.TB, cfg demux.Config, n int) (*demux.Table[int], []netip.AddrPort) {
	return buildTable(b, cfg, n, func(i int) (demux.Options, netip.AddrPort) {
		p := uint16(1 + i)
		return demux.Options{Addr: netip.IPv4Unspecified(), Port: p}, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 1}), p)
	})
}

// distinctPorts6Table binds n IPv6-only "::" sockets on distinct ports.
func distinctPorts6Table(b testing.TB, cfg demux.Config, n int) (*demux.Table[int], []netip.AddrPort) {
	return buildTable(b, cfg, n, func(i int) (demux.Options, netip.AddrPort) {
		p := uint16(1 + i)
		return demux.Options{Addr: netip.IPv6Unspecified(), Port: p, V6Only: true}, netip.AddrPortFrom(addr6N(1), p)
	})
}

func benchLookups(b *testing.B, t *demux.Table[int], dsts []netip.AddrPort) {
	src := netip.MustParseAddrPort("192.0.2.1:40000")
	if dsts[0].Addr().Is6() {
		src = netip.MustParseAddrPort("[2001:db8:ffff::1]:40000")
	}
	b.ReportAllocs()
	b.ResetTimer()
	miss := 0
	for i := 0; b.Loop(); i++ {
		if s, _ := t.Lookup(src, dsts[i%len(dsts)], 1); s == nil {
			miss++
		}
	}
	if miss > 0 {
		b.Fatalf("%d lookups found no socket", miss)
	}
}

// BenchmarkLookup measures lookups in the two shapes of the 2009 netdev
// discussion, under each strategy, with a Go map probe as the floor.
func BenchmarkLookup(b *testing.B) {
	shapes := []struct {
		name  string
		n     int
		build func(testing.TB, demux.Config, int) (*demux.Table[int], []netip.AddrPort)
	}{
		{"same-port", 512, samePortTable},
		{"same-port", 4096, samePortTable},
		{"distinct-ports", 65000, distinctPortsTable},
		{"same-port-v6", 512, samePort6Table},
		{"distinct-ports-v6", 65000, distinctPorts6Table},
	}
	for _, sh := range shapes {
		for _, s := range strategies {
			b.Run(fmt.Sprintf("%s-%d/%v", sh.name, sh.n, s), func(b *testing.B) {
				t, dsts := sh.build(b, benchConfig(s), sh.n)
				benchLookups(b, t, dsts)
			})
		}
		b.Run(fmt.Sprintf("%s-%d/map", sh.name, sh.n), func(b *testing.B) {
			_, dsts := sh.build(b, benchConfig(demux.Hybrid), sh.n)
			m := make(map[netip.AddrPort]int, len(dsts))
			for i, d := range dsts {
				m[d] = i
			}
			b.ReportAllocs()
			b.ResetTimer()
			sum := 0
			for i := 0; b.Loop(); i++ {
				sum += m[dsts[i%len(dsts)]]
			}
			_ = sum
		})
	}
}

// BenchmarkLookupSlots measures hybrid lookups in fixed-slot tables of
// 256, 4096 and 65536 slots, and in the default growing tables (slots=0),
// for the README's advice on choosing the slot count: 65 000 wildcard sockets on distinct ports (each primary chain holds
// the sockets of about sockets/slots ports) and 16 384 sockets on one port
// at distinct addresses (each secondary chain holds about sockets/slots).
func BenchmarkLookupSlots(b *testing.B) {
	shapes := []struct {
		name  string
		n     int
		build func(testing.TB, demux.Config, int) (*demux.Table[int], []netip.AddrPort)
	}{
		{"distinct-ports", 65000, distinctPortsTable},
		{"same-port", 16384, samePortTable},
	}
	for _, sh := range shapes {
		for _, slots := range []int{256, 4096, 65536, 0} {
			b.Run(fmt.Sprintf("%s-%d/slots=%d", sh.name, sh.n, slots), func(b *testing.B) {
				t, dsts := sh.build(b, demux.Config{Slots: slots}, sh.n)
				benchLookups(b, t, dsts)
			})
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	t, _ := samePortTable(b, benchConfig(demux.Hybrid), 64)
	for b.Loop() {
		if err := t.Verify(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookupParallel measures lookups from several goroutines (run
// with -cpu 1,2) with path counting off and on: a shared counter written on
// every lookup is what Config.CountPaths costs.
func BenchmarkLookupParallel(b *testing.B) {
	for _, count := range []bool{false, true} {
		b.Run(fmt.Sprintf("count-%v", count), func(b *testing.B) {
			t, dsts := samePortTable(b, demux.Config{Slots: 65536, CountPaths: count}, 4096)
			src := netip.MustParseAddrPort("192.0.2.1:40000")
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					if s, _ := t.Lookup(src, dsts[i%len(dsts)], 1); s == nil {
						b.Error("no socket")
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkLookupBesideWriter measures lookups on one goroutine, with 4 096
// sockets on one port at distinct addresses (the default Config), while
// another goroutine binds and closes sockets on another port flat out, or
// while none does. The writer shares no chain or key with the lookups, so
// what it costs them is what its writes take from their caches (and the
// CPU time of the garbage collector, which its entries keep busy).
func BenchmarkLookupBesideWriter(b *testing.B) {
	unchecked(b)
	for _, writer := range []bool{false, true} {
		b.Run(fmt.Sprintf("writer-%v", writer), func(b *testing.B) {
			t, err := demux.New[int](demux.Config{})
			if err != nil {
				b.Fatal(err)
			}
			dsts := make([]netip.AddrPort, 4096)
			for i := range dsts {
				dsts[i] = netip.AddrPortFrom(addrN(i), 53)
				if _, err := t.Bind(demux.Options{Addr: addrN(i), Port: 53, ReuseAddr: true}, i); err != nil {
					b.Fatal(err)
				}
			}
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(dsts), func(i, j int) { dsts[i], dsts[j] = dsts[j], dsts[i] })
			src := netip.MustParseAddrPort("192.0.2.1:40000")
			var stop atomic.Bool
			defer stop.Store(true) // should the loop fail
			werr := make(chan error, 1)
			go func() {
				for k := 0; writer && !stop.Load(); k++ {
					s, err := t.Bind(demux.Options{Addr: addrN(1<<16 + k%1024), Port: 9999}, 0)
					if err == nil {
						err = t.Close(s)
					}
					if err != nil {
						werr <- err
						return
					}
				}
				werr <- nil
			}()
			i := 0
			for b.Loop() {
				if s, _ := t.Lookup(src, dsts[i%len(dsts)], 1); s == nil {
					b.Fatal("no socket")
				}
				i++
			}
			stop.Store(true)
			if err := <-werr; err != nil {
				b.Fatal(err)
			}
		})
	}
}
