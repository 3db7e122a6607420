package serve_test

import (
	"flag"
	"net/netip"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// costPorts is how many ports TestPortCost binds: go test -run
// TestPortCost -v -args -ports 10000 measures many (each needs a file
// descriptor per family: see ulimit -n).
var costPorts = flag.Int("ports", 200, "ports that TestPortCost binds")

// maxIdlePortHeap is the most heap an idle port in use may cost: with a
// reader's buffers per kernel socket, 100 000 ports took about 30 GiB.
const maxIdlePortHeap = 16 << 10

// TestPortCost measures what an idle port in use costs: it binds sockets
// on ports of their own and reports the heap, stack, file descriptors
// and goroutines they added, per port (go test -run TestPortCost -v).
// The counts of descriptors and goroutines are exact and checked, and
// the heap is at most maxIdlePortHeap: an idle reader holds no buffers.
func TestPortCost(t *testing.T) {
	ports := *costPorts
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
			cl := client(t, "127.0.0.1")
			var before, after runtime.MemStats
			// Two collections: the first moves what earlier tests left in
			// sync.Pools to the pools' victim caches, the second frees
			// it, so that none of it leaves the heap during the
			// measurement. Then the free memory goes back to the system.
			runtime.GC()
			debug.FreeOSMemory()
			runtime.ReadMemStats(&before)
			gs := quietGoroutines()
			fds := openFDs(t)
			for i := 0; i < ports; {
				sk, err := srv.Table().Bind(demux.Options{Addr: netip127()}, "s")
				if err != nil {
					continue
				}
				i++
				// One datagram each: a reader that has handled a batch
				// holds no buffers either, once its socket is empty.
				_, err = cl.WriteToUDPAddrPort([]byte("x"), netip.AddrPortFrom(netip127(), sk.Options().Port))
				require.NoError(t, err)
			}
			assert.Equal(t, uint64(ports), settles64(uint64(ports), func() uint64 { return srv.Stats().Delivered }), "datagrams handled")
			// Let every reader block in its read.
			perPort := 2
			if o.opts.IPv4Only || !hasIPv6Loopback(t) {
				perPort = 1
			}
			settles(gs+perPort*ports, runtime.NumGoroutine)
			// Wait until the heap stops growing: the readers' last
			// batches go to the pool, which two collections empty.
			for prev, deadline := uint64(0), time.Now().Add(readTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				runtime.GC()
				runtime.ReadMemStats(&after)
				if after.HeapAlloc < prev+prev/100 {
					break
				}
				prev = after.HeapAlloc
			}
			// Signed: a heap that shrank shows as a negative figure, not
			// as a wrapped-around one.
			heap := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(ports) / 1024
			stack := (float64(after.StackInuse) - float64(before.StackInuse)) / float64(ports) / 1024
			dfd := float64(openFDs(t)-fds) / float64(ports)
			dg := float64(runtime.NumGoroutine()-gs) / float64(ports)
			// The peaks of the burst above (stacks that grew and shrank,
			// batches made while the pool was empty) are given back
			// to the system, as the runtime does over minutes.
			debug.FreeOSMemory()
			runtime.ReadMemStats(&after)
			// What the runtime holds of the system's memory (heap,
			// stacks and its own structures, such as the poller's
			// descriptors, less what it gave back): what a process's
			// memory limit sees of Go's share.
			held := func(m *runtime.MemStats) float64 { return float64(m.Sys) - float64(m.HeapReleased) }
			sys := (held(&after) - held(&before)) / float64(ports) / 1024
			t.Logf("%d idle ports: per port %.1f KiB heap, %.1f KiB stack (%.1f KiB held from the system), %.2f fds, %.2f goroutines", ports, heap, stack, sys, dfd, dg)
			assert.LessOrEqual(t, heap, float64(maxIdlePortHeap)/1024, "KiB of heap per idle port")
			assert.Equal(t, srv.Stats().Ports, ports)
			assert.InDelta(t, float64(perPort), dfd, 0.01)
			assert.InDelta(t, float64(perPort), dg, 0.01)
		})
	}
}

// settles64 is settles for a count that grows to want.
func settles64(want uint64, f func() uint64) uint64 {
	deadline := time.Now().Add(readTimeout)
	n := f()
	for n < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		n = f()
	}
	return n
}

func netip127() netip.Addr { return netip.MustParseAddr("127.0.0.1") }
