package serve_test

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// TestPortCost measures what an idle port in use costs: it binds sockets
// on ports of their own and reports the heap, stack, file descriptors
// and goroutines they added, per port (go test -run TestPortCost -v).
// The counts of descriptors and goroutines are exact and checked; the
// memory figures are for the documentation.
func TestPortCost(t *testing.T) {
	const ports = 200
	for _, o := range []struct {
		name string
		opts serve.Options
	}{
		{"both families", serve.Options{}},
		{"IPv4Only", serve.Options{IPv4Only: true}},
	} {
		t.Run(o.name, func(t *testing.T) {
			srv, err := serve.New[string](demux.Config{}, func(*serve.Request[string]) {}, o.opts)
			require.NoError(t, err)
			defer srv.Close()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			gs := quietGoroutines()
			fds := openFDs(t)
			for i := 0; i < ports; {
				if _, err := srv.Table().Bind(demux.Options{Addr: netip127()}, "s"); err == nil {
					i++
				}
			}
			// Let every reader block in its first read, with its buffers.
			perPort := 2
			if o.opts.IPv4Only || !hasIPv6Loopback(t) {
				perPort = 1
			}
			settles(gs+perPort*ports, runtime.NumGoroutine)
			// A reader allocates its buffers once it runs: wait until
			// the heap stops growing.
			for prev, deadline := uint64(0), time.Now().Add(readTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				runtime.GC()
				runtime.ReadMemStats(&after)
				if after.HeapAlloc < prev+prev/100 {
					break
				}
				prev = after.HeapAlloc
			}
			heap := float64(after.HeapAlloc-before.HeapAlloc) / ports / 1024
			stack := float64(after.StackInuse-before.StackInuse) / ports / 1024
			dfd := float64(openFDs(t)-fds) / ports
			dg := float64(runtime.NumGoroutine()-gs) / ports
			t.Logf("per idle port: %.1f KiB heap, %.1f KiB stack, %.2f fds, %.2f goroutines", heap, stack, dfd, dg)
			assert.Equal(t, srv.Stats().Ports, ports)
			assert.InDelta(t, float64(perPort), dfd, 0.01)
			assert.InDelta(t, float64(perPort), dg, 0.01)
		})
	}
}

func netip127() netip.Addr { return netip.MustParseAddr("127.0.0.1") }
