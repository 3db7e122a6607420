package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// seed fixes the shapes' random addresses, ports and lookup orders.
const seed = 2009

// slots is udpdemux's table size in the lookup benchmarks.
const slots = 65536

// benchShape loads sh into every contender in turn and runs one
// sub-benchmark per set and contender, named set/contender. The table is
// built once per contender, outside the timer, and checked before it is
// timed.
func benchShape(b *testing.B, sh *suite.Shape, sets []string, skip func(suite.Target) bool) {
	benchTargets(b, sh, sets, suite.Targets, skip)
}

// benchTargets is benchShape for the given contenders.
func benchTargets(b *testing.B, sh *suite.Shape, sets []string, targets []suite.Target, skip func(suite.Target) bool) {
	for _, t := range targets {
		if skip != nil && skip(t) {
			continue
		}
		var f suite.Fixture
		for _, set := range sets {
			i := sh.SetIndex(set)
			b.Run(set+"/"+t.Name, func(b *testing.B) {
				if f == nil {
					var err error
					if f, _, err = suite.Prepare(t, sh, suite.Options{}); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Check(i, 4096); err != nil {
					b.Fatal(err)
				}
				f.Bench(i)(b)
			})
		}
		if f != nil {
			f.Close()
		}
	}
}

// BenchmarkSamePort is scenario 1: n sockets on one port at distinct IPv4
// addresses plus one on 0.0.0.0; datagrams to bound addresses and to
// addresses only the wildcard socket serves.
func BenchmarkSamePort(b *testing.B) {
	for _, n := range []int{256, 512, 4096, 65536} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			benchShape(b, suite.SamePort(n, slots, seed), []string{suite.SetBound, suite.SetWildcard}, nil)
		})
	}
}

// BenchmarkDistinctPorts is scenario 2: 65 000 sockets on 0.0.0.0 at
// distinct ports.
func BenchmarkDistinctPorts(b *testing.B) {
	benchShape(b, suite.DistinctPorts(65000, slots, seed), []string{suite.SetBound}, nil)
}

// BenchmarkPerPort is scenario 3: 32 768 sockets, k per port, for k from
// 1 to 4096.
func BenchmarkPerPort(b *testing.B) {
	for _, k := range []int{1, 2, 4, 8, 10, 11, 12, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			benchShape(b, suite.PerPort(32768, k, slots, seed), []string{suite.SetBound}, nil)
		})
	}
}

// BenchmarkMixed is scenario 4: a DNS forwarder with 16 service
// addresses, 8 connected peers and 50 000 connected client sockets.
func BenchmarkMixed(b *testing.B) {
	benchShape(b, suite.Mixed(50000, slots, seed), []string{suite.SetQueries, suite.SetReplies, suite.SetPeers, suite.SetMix}, nil)
}

// BenchmarkScale is scenario 5's lookups: shapes 1 and 2 from 1 000
// sockets up (one-phase only up to 65 536 sockets on one port).
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000, 1000000} {
		b.Run(fmt.Sprint("same-port/", n), func(b *testing.B) {
			benchShape(b, suite.SamePort(n, slots, seed), []string{suite.SetBound}, func(t suite.Target) bool {
				return t == suite.OnePhase && n > 65536
			})
		})
	}
	for _, n := range []int{1000, 10000, 65000} {
		b.Run(fmt.Sprint("distinct-ports/", n), func(b *testing.B) {
			benchShape(b, suite.DistinctPorts(n, slots, seed), []string{suite.SetBound}, nil)
		})
	}
}

// BenchmarkBuild is scenario 5's bind cost: building the same-port and
// distinct-ports tables of n sockets, per socket. gVisor reserves each
// port with its PortManager before registering the endpoint, as its UDP
// bind does.
func BenchmarkBuild(b *testing.B) {
	shapes := []*suite.Shape{suite.SamePort(10000, slots, seed), suite.DistinctPorts(10000, slots, seed)}
	for _, sh := range shapes {
		for _, t := range suite.Targets {
			b.Run(sh.Name+"/"+t.Name, func(b *testing.B) {
				b.ReportAllocs()
				var total time.Duration
				for b.Loop() {
					f, c, err := suite.Prepare(t, sh, suite.Options{Reserve: true})
					if err != nil {
						b.Fatal(err)
					}
					total += c.Build
					f.Close()
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N)/float64(len(sh.Socks)), "ns/bind")
			})
		}
	}
}

// BenchmarkParallel is scenario 6 for go test: lookups of the bound
// datagrams with b.RunParallel, so that -cpu 1,2 compares 1 and 2
// goroutines. The udpbench runner also measures them with a concurrent
// writer.
func BenchmarkParallel(b *testing.B) {
	shapes := []*suite.Shape{suite.SamePort(4096, slots, seed), suite.DistinctPorts(65000, slots, seed)}
	for _, sh := range shapes {
		for _, t := range []suite.Target{suite.Hybrid, suite.GVisor, suite.Floor} {
			b.Run(sh.Name+"/"+t.Name, func(b *testing.B) {
				f, _, err := suite.Prepare(t, sh, suite.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				if err := f.Check(0, 4096); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				suite.RunParallel(b, f, 0)
			})
		}
	}
}

// flat are the contenders of the growing-table benchmarks.
var flat = []suite.Target{suite.Default, suite.GVisor, suite.Floor}

// BenchmarkConnected is the connected shape: n sockets on one address
// and port, each connected to a peer of its own, plus a listener.
func BenchmarkConnected(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			benchTargets(b, suite.Connected(n, seed), []string{suite.SetKnown, suite.SetUnknown}, flat, nil)
		})
	}
}

// BenchmarkReusePortGroup is a SO_REUSEPORT group of 100 000 members.
func BenchmarkReusePortGroup(b *testing.B) {
	benchTargets(b, suite.ReusePortGroup(100000, seed), []string{suite.SetFlows}, flat, nil)
}

// BenchmarkAliased is the port-aliasing attack: the victim's lookups with
// 0 and 100 000 attackers on its aliased port.
func BenchmarkAliased(b *testing.B) {
	for _, n := range []int{0, 100000} {
		for _, group := range []bool{false, true} {
			sh := suite.Aliased(n, group, seed)
			b.Run(sh.Name, func(b *testing.B) {
				benchTargets(b, sh, []string{suite.SetVictim}, []suite.Target{suite.Default, suite.Fixed4096}, nil)
			})
		}
	}
}

// BenchmarkBatch is LookupBatch of 32 datagrams at 1 000 000 sockets on
// one port (ns/op is per batch).
func BenchmarkBatch(b *testing.B) {
	sh := suite.SamePort(1000000, 0, seed)
	f, _, err := suite.Prepare(suite.Default, sh, suite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bf := f.(suite.Batcher)
	if err := bf.CheckBatch(0, 4096); err != nil {
		b.Fatal(err)
	}
	bf.BenchBatch(0)(b)
}
