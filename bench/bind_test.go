package bench

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// BenchmarkBind0 is scenario 7: bind(0) on 0.0.0.0 and close, in a
// 10 000-port range with 5000, 100, 10, 1 and 0 ports free (scattered),
// for udpdemux's three algorithms, gVisor's PortManager and (as root, in
// a network namespace) the Linux kernel.
func BenchmarkBind0(b *testing.B) {
	for _, free := range []int{5000, 100, 10, 1, 0} {
		for _, t := range append(suite.Bind0Targets, suite.Kernel) {
			b.Run(fmt.Sprintf("free=%d/%s", free, t.Name), func(b *testing.B) {
				f, err := suite.PrepareBind0(t, free, seed)
				if err == nil {
					err = f.Check()
				}
				if errors.Is(err, suite.ErrNoNamespace) {
					b.Skip(err)
				}
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				f.Bench()(b)
			})
		}
	}
}

// BenchmarkReproducer is the bind(0) livelock reproducer: 64 goroutines
// binding port 0 and closing the sockets on the neighbouring ports of an
// almost full range, for one second; it reports bind(0) calls per second.
func BenchmarkReproducer(b *testing.B) {
	for _, t := range suite.Bind0Targets {
		b.Run(t.Name, func(b *testing.B) {
			var binds uint64
			var elapsed time.Duration
			for b.Loop() {
				r, err := suite.Reproduce(t, 64, 128, time.Second, seed)
				if err != nil {
					b.Fatal(err)
				}
				binds += r.Binds
				elapsed += r.Elapsed
			}
			b.ReportMetric(float64(binds)/elapsed.Seconds(), "binds/s")
		})
	}
}
