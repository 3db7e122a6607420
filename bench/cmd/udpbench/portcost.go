package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// The port-cost scenario binds table sockets through demux/serve, each on
// a port of its own, and measures what an idle port in use costs: each
// such port has kernel sockets of its own and their readers, which wait
// for datagrams that may never come.

// portCostPorts is how many ports one measurement binds. One address
// family has 65 535 ports, so a full run binds most of those above 1023
// and the goal on 100 000 ports is judged on the cost per port.
var portCostPorts = byRun[int]{2000, 60000}

// portCostGoal is the count of idle ports that must fit in
// portCostBudget (2 GiB).
const (
	portCostGoal   = 100000
	portCostBudget = 2 << 30
	// portCostHeap is the most heap an idle port may cost.
	portCostHeap = 16 << 10
	// portCostSpareFiles is the file descriptors left for the rest of
	// the process.
	portCostSpareFiles = 512
)

// The sides of the port-cost scenario.
const (
	pcBoth = "both families"
	pcV4   = "IPv4Only"
)

// portCost is what one measurement found, per port.
type portCost struct {
	ports      int
	heap       float64 // live heap after a collection
	stack      float64 // goroutine stacks in use
	held       float64 // the runtime's memory from the system, less what it gave back
	rss        float64 // the process's resident memory
	slab       float64 // the kernel's slab memory (sockets, files): the host's, not only ours
	fds        float64
	goroutines float64
	bind       time.Duration // bind of one port, with its kernel sockets and readers
}

func (r *runner) portCost() {
	n := portCostPorts.at(r.c.quick)
	files, err := raiseFileLimit(uint64(2*n + portCostSpareFiles))
	if err != nil {
		r.fail("port-cost: %v", err)
		return
	}
	if fit := (int(files) - openFiles() - portCostSpareFiles) / 2; fit < n {
		r.progress("port-cost: the limit of open files (%d) leaves room for %d ports with both families, not %d", files, fit, n)
		r.notes = append(r.notes, fmt.Sprintf("port-cost measured %d ports, not %d: the limit of open files is %d, and "+
			"this process may not raise it (CAP_SYS_RESOURCE)", fit, n, files))
		n = fit
	}
	r.printf("Sockets bound through `demux/serve` (default Config, one handler), each on a port of its own "+
		"(127.0.0.1, ports from 1024 up, skipping those in use), %s ports per measurement; each port receives one "+
		"datagram, then stays idle. Per port: the growth of the live heap after a garbage collection, of goroutine "+
		"stacks, of what the Go runtime holds from the system (`Sys` less `HeapReleased`, after `debug.FreeOSMemory`), "+
		"of the process's resident memory (VmRSS) and of the host's kernel slab memory (`/proc/meminfo` Slab: the kernel "+
		"sockets and their files, and whatever else the host did meanwhile), with the file descriptors and goroutines "+
		"added. *Bind* is the time of one table bind that opens a port. One address family has 65 535 ports, so the "+
		"goal on %s ports is judged on %s × the runtime's memory per port.\n\n",
		fmtInt(n), fmtInt(portCostGoal), fmtInt(portCostGoal))
	t := newTable("kernel sockets", "ports", "heap/port", "stacks/port", "runtime/port", "RSS/port", "kernel slab/port",
		"fds/port", "goroutines/port", "bind", fmt.Sprintf("runtime × %s", fmtInt(portCostGoal)))
	var slabBoth float64
	for _, side := range []string{pcBoth, pcV4} {
		c, err := measurePortCost(n, serve.Options{IPv4Only: side == pcV4})
		if err != nil {
			r.fail("port-cost, %s: %v", side, err)
			return
		}
		whole := c.held * portCostGoal
		t.add(side, fmtInt(c.ports), fmtBytes(c.heap), fmtBytes(c.stack), fmtBytes(c.held), fmtBytes(c.rss),
			fmtBytes(c.slab), fmt.Sprintf("%.2f", c.fds), fmt.Sprintf("%.2f", c.goroutines), fmtNs(float64(c.bind.Nanoseconds())),
			fmtBytes(whole))
		if side == pcBoth {
			slabBoth = c.slab
		}
		r.set(key{scen: scPortCost, shape: side, m: heapBytes}, c.heap)
		r.set(key{scen: scPortCost, shape: side, n: portCostGoal, m: heapBytes}, whole)
	}
	r.printf("%s\nEach idle port keeps one kernel socket and one reader goroutine per family; the reader waits "+
		"in the runtime's poller holding no buffer, and takes one from a shared pool when its socket is readable. "+
		"The goal counts the process's memory; the kernel's memory for the sockets (the slab column, the host's) "+
		"comes on top of it: %s × that of both families is %s.\n\n", t, fmtInt(portCostGoal), fmtBytes(slabBoth*portCostGoal))
}

func (r *runner) portCostGoals() []goal {
	var heap, whole []place
	for _, side := range []string{pcBoth, pcV4} {
		heap = append(heap, place{side, r.val(key{scen: scPortCost, shape: side, m: heapBytes})})
		whole = append(whole, place{side, r.val(key{scen: scPortCost, shape: side, n: portCostGoal, m: heapBytes})})
	}
	return []goal{
		limit(fmt.Sprintf("Cost per port: at most %s of heap per idle port in use (serve, one socket per port)",
			fmtBytes(portCostHeap)), heap, true, portCostHeap, fmtBytes),
		limit(fmt.Sprintf("Cost per port: %s idle ports with one socket each fit in 2 GiB (the Go runtime's memory per port × %s)",
			fmtInt(portCostGoal), fmtInt(portCostGoal)), whole, true, portCostBudget, fmtBytes),
	}
}

// measurePortCost binds n ports through a new server with opts and
// measures what they cost, per port.
func measurePortCost(n int, opts serve.Options) (portCost, error) {
	srv, err := serve.New[struct{}](demux.Config{}, func(*serve.Request[struct{}]) {}, opts)
	if err != nil {
		return portCost{}, err
	}
	defer srv.Close()
	cl, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return portCost{}, err
	}
	defer cl.Close()
	lo := netip.MustParseAddr("127.0.0.1")

	var before, after runtime.MemStats
	debug.FreeOSMemory()
	runtime.ReadMemStats(&before)
	g0, fd0, rss0, slab0 := runtime.NumGoroutine(), openFiles(), meminfo("/proc/self/status", "VmRSS:"), meminfo("/proc/meminfo", "Slab:")

	c := portCost{}
	ports := make([]uint16, 0, n)
	start := time.Now()
	for p := 1024; len(ports) < n; p++ {
		if p > 65535 {
			return portCost{}, fmt.Errorf("only %d free ports for %d", len(ports), n)
		}
		if _, err := srv.Table().Bind(demux.Options{Addr: lo, Port: uint16(p)}, struct{}{}); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				continue // another program's port
			}
			return portCost{}, fmt.Errorf("bind of port %d: %w", p, err)
		}
		ports = append(ports, uint16(p))
	}
	c.ports = len(ports)
	c.bind = time.Since(start) / time.Duration(c.ports)
	for _, p := range ports {
		if _, err := cl.WriteToUDPAddrPort([]byte("x"), netip.AddrPortFrom(lo, p)); err != nil {
			return portCost{}, err
		}
	}
	for deadline := time.Now().Add(time.Minute); srv.Stats().Delivered < uint64(c.ports); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return portCost{}, fmt.Errorf("%d of %d datagrams delivered", srv.Stats().Delivered, c.ports)
		}
	}
	// The readers' last batches go back to the pool, which two
	// collections empty: wait until the heap stops shrinking.
	for prev, i := uint64(0), 0; i < 50; i++ {
		runtime.GC()
		runtime.ReadMemStats(&after)
		if prev != 0 && after.HeapAlloc+after.HeapAlloc/100 >= prev {
			break
		}
		prev = after.HeapAlloc
		time.Sleep(20 * time.Millisecond)
	}
	per := func(a, b float64) float64 { return (a - b) / float64(c.ports) }
	c.heap = per(float64(after.HeapAlloc), float64(before.HeapAlloc))
	c.stack = per(float64(after.StackInuse), float64(before.StackInuse))
	c.goroutines = per(float64(runtime.NumGoroutine()), float64(g0))
	c.fds = per(float64(openFiles()), float64(fd0))
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	held := func(m *runtime.MemStats) float64 { return float64(m.Sys) - float64(m.HeapReleased) }
	c.held = per(held(&after), held(&before))
	c.rss = per(meminfo("/proc/self/status", "VmRSS:"), rss0)
	c.slab = per(meminfo("/proc/meminfo", "Slab:"), slab0)
	return c, nil
}

// raiseFileLimit raises the soft limit of open files towards n, and the
// hard one if it must and may (CAP_SYS_RESOURCE), and returns the limit
// it got.
func raiseFileLimit(n uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur >= n {
		return l.Cur, nil
	}
	want := l
	want.Cur = n
	if want.Max < n {
		want.Max = n
	}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
		return n, nil
	}
	// Not allowed past the hard limit: up to it, then.
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("raising the limit of open files: %w", err)
	}
	return l.Cur, nil
}

// openFiles counts this process's open file descriptors.
func openFiles() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(es)
}

// meminfo reads a field in kB of a /proc status file, in bytes; 0 if it
// cannot.
func meminfo(file, field string) float64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
