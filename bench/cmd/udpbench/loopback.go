package main

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/internal/osthread"
)

// The loopback scenario is the 2009 tester on real sockets: a sender
// process sends datagrams to nsocks loopback addresses on one port, and
// two receivers take them in turn — udpdemux through its kernel-socket
// adapter (one wildcard kernel socket, the table picks the socket) and the
// kernel itself (nsocks sockets, one per address, the kernel's UDP lookup
// picks).

// loopbackFlags are the loopback scenario's own flags, which set one row;
// without -nsocks it runs the four rows.
type loopbackFlags struct {
	nsocks, ndgrams, payload int
	strategy                 string
}

// define defines the loopback scenario's flags.
func (l *loopbackFlags) define() {
	flag.IntVar(&l.nsocks, "nsocks", 0, "loopback scenario: sockets (addresses) of one row (default: the four rows 512, 128, 32, 8)")
	flag.IntVar(&l.ndgrams, "ndgrams", 2000, "loopback scenario: datagrams sent to each socket")
	flag.IntVar(&l.payload, "payload", 64, "loopback scenario: payload bytes per datagram (at least 4)")
	flag.StringVar(&l.strategy, "strategy", "hybrid", "loopback scenario: udpdemux lookup strategy (hybrid, one-phase, two-phase)")
}

// loopbackRows are the rows run without -nsocks: the sockets of the 2009
// table's rows, from 512 down, each with -ndgrams datagrams per socket.
var loopbackRows = []int{512, 128, 32, 8}

// Figures of the scenario: shapes of its ratioX keys.
const (
	lbVsKernel    = "received/s ÷ kernel's"
	lbLookupShare = "lookup share of receiver CPU"
	lbTwoReaders  = "received/s, 2 readers ÷ 1"
	lbTwoCPU      = "CPU per datagram, 2 readers ÷ 1"
)

// The loopback scenario's receivers.
const (
	lbDemux   = "udpdemux"
	lbKernel  = "kernel"
	lbDemux2R = "udpdemux, 2 readers"
)

// lbResult is one receiver's run of one row.
// times says n times in words.
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// rate returns the datagrams received per second.
func (res lbResult) rate() float64 { return float64(res.got) / res.elapsed.Seconds() }

type lbResult struct {
	sent       int
	sendTime   time.Duration
	got, wrong uint64
	elapsed    time.Duration // from the first send to the last datagram received
	cpu        time.Duration // this process's CPU time meanwhile: the receiver's
	lookupNs   float64       // a lookup's cost, measured after the run (NaN: the kernel's)
}

func (r *runner) loopback() {
	strategy, err := parseStrategy(r.c.loopback.strategy)
	if err != nil {
		r.fail("loopback: %v", err)
		return
	}
	rows := loopbackRows
	if r.c.loopback.nsocks > 0 {
		rows = []int{r.c.loopback.nsocks}
	}
	ndgrams := r.c.loopback.ndgrams
	if r.c.quick {
		ndgrams = min(ndgrams, 20)
	}
	where := "the host's loopback"
	run := func(f func()) { f() }
	if os.Geteuid() == 0 {
		// A thread in a network namespace of its own with loopback up:
		// sockets made there stay there, and the sender process started
		// there inherits it.
		th, err := osthread.Start(true, func() error {
			if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
				return fmt.Errorf("ip link set lo up: %v: %s", err, out)
			}
			return nil
		})
		if err != nil {
			r.fail("loopback: a network namespace of its own: %v", err)
			return
		}
		defer th.Stop()
		run, where = th.Do, "the loopback of a network namespace of its own"
	}
	r.printf("A sender process sends %d datagrams of %d bytes to each of *nsocks* addresses 127.1.x.y on one port, "+
		"round after round, in sendmmsg batches of 64 from %d sockets, on %s. Three receivers take them in turn: "+
		"**udpdemux** through `demux/serve` (one wildcard kernel socket with the receive buffer of *nsocks* sockets, "+
		"recvmmsg reads of up to 64 datagrams, each offering twice the last read's count and at least 8, the table's %s lookup picks one of *nsocks* table sockets) and **kernel** (*nsocks* sockets, one per address, each read by its own "+
		"goroutine in recvmmsg batches of 64: the kernel's UDP lookup picks), and **udpdemux, 2 readers** (as udpdemux, with `serve.Options.Readers` 2: two kernel sockets in an SO_REUSEPORT group, each with that buffer and its own reader goroutine). Each row runs the three %s, in rounds that start one receiver later each time (udpdemux, kernel, 2 readers; then kernel, 2 readers, udpdemux; ...), so "+
		"that a change of the machine's load between rounds touches all alike; each receiver's line shows its run of "+
		"median received/s, *wrong* counts every run, and the goal compares the median of the rounds' ratios, listed "+
		"below the table. Drops are datagrams sent but not received "+
		"(on loopback, only a full receive queue loses them). CPU is this process's (getrusage), which runs only the "+
		"receiver. Lookup share is the datagrams received times the cost of one lookup (in brackets: the table's "+
		"LookupBatch per datagram on the run's datagrams, the fastest of three testing.Benchmark runs right after "+
		"the run, warm caches), over that CPU time. On loopback the kernel's own receive path, its UDP socket lookup included, runs "+
		"in the sender's softirq context, so neither receiver's CPU time contains it; udpdemux's contains its table's "+
		"lookups. While the sender is the bottleneck, both receivers receive at its rate: compare CPU per datagram "+
		"then. Every datagram's payload names "+
		"its destination, and a datagram that reached another socket counts as wrong.\n\n",
		ndgrams, max(r.c.loopback.payload, 4), senderSockets, where, strategy, times(r.c.runs))
	var limits []string // what limited each row, from its figures
	var roundNotes, readerNotes []string
	tb := newTable("nsocks", "ndgrams", "payload", "receiver", "send time", "received", "drops", "wrong",
		"received/s", "CPU/datagram", "lookup share")
	receivers := []string{lbDemux, lbKernel, lbDemux2R}
	for _, nsocks := range rows {
		// The receivers run in rounds, one after the other, so that a
		// change of the machine's load between rounds touches all alike,
		// in turn first.
		runs := map[string][]lbResult{}
		var wrong [3]uint64
		var rs, rs2, cpu2 []float64 // the rounds' ratios, in run order
		for round := range r.c.runs {
			var dps, cpuPer [3]float64
			for j := range receivers {
				// Each round starts one receiver later in the list than
				// the one before, so that what the first run of a round
				// pays (a cold sender, a cache the other left) falls on
				// each receiver alike, once in every len(receivers) rounds.
				i := (j + round) % len(receivers)
				recv := receivers[i]
				r.progress("  loopback %d sockets × %d datagrams: %s", nsocks, ndgrams, recv)
				var res lbResult
				var err error
				run(func() { res, err = loopbackRun(recv, nsocks, ndgrams, r.c.loopback.payload, strategy) })
				if err != nil {
					r.fail("loopback %d × %d, %s: %v", nsocks, ndgrams, recv, err)
					continue
				}
				if res.wrong > 0 {
					r.fail("loopback %d × %d, %s: %d datagrams reached the wrong socket", nsocks, ndgrams, recv, res.wrong)
				}
				wrong[i] += res.wrong
				runs[recv] = append(runs[recv], res)
				dps[i] = res.rate()
				cpuPer[i] = float64(res.cpu.Nanoseconds()) / float64(max(res.got, 1))
			}
			if dps[0] > 0 && dps[1] > 0 {
				rs = append(rs, dps[0]/dps[1])
			}
			if dps[0] > 0 && dps[2] > 0 {
				rs2 = append(rs2, dps[2]/dps[0])
				cpu2 = append(cpu2, cpuPer[2]/cpuPer[0])
			}
		}
		for i, recv := range receivers {
			if len(runs[recv]) == 0 {
				continue
			}
			// The run of the median rate stands for the receiver.
			slices.SortFunc(runs[recv], func(a, b lbResult) int { return cmp.Compare(a.rate(), b.rate()) })
			res := runs[recv][len(runs[recv])/2]
			perDgram := float64(res.cpu.Nanoseconds()) / float64(max(res.got, 1))
			share := "—"
			k := key{scen: scLoopback, n: nsocks, target: recv}
			if !math.IsNaN(res.lookupNs) {
				sh := res.lookupNs * float64(res.got) / float64(res.cpu.Nanoseconds())
				share = fmt.Sprintf("%.1f %% (%s)", 100*sh, fmtNs(res.lookupNs))
				k.shape, k.m = lbLookupShare, ratioX
				r.set(k, sh)
			}
			k.shape, k.m = "", wrongCount
			r.set(k, float64(wrong[i]))
			if recv == lbDemux && !math.IsNaN(res.lookupNs) {
				limits = append(limits, loopbackLimit(nsocks, perDgram, res.lookupNs, res.sendTime, res.elapsed))
			}
			tb.add(strconv.Itoa(nsocks), fmtInt(ndgrams), strconv.Itoa(max(r.c.loopback.payload, 4)), recv,
				fmtDur(res.sendTime), fmtInt(int(res.got)), fmtInt(res.sent-int(res.got)),
				fmtInt(int(wrong[i])), fmtRate(res.rate()), fmtNs(perDgram), share)
		}
		if len(rs) > 0 {
			var each []string
			for _, x := range rs {
				each = append(each, fmtX(x))
			}
			m := median(rs) // sorts rs
			r.set(key{scen: scLoopback, n: nsocks, target: lbDemux, shape: lbVsKernel, m: ratioX}, m)
			roundNotes = append(roundNotes, fmt.Sprintf("%d sockets: %s (median %s)", nsocks, strings.Join(each, ", "), fmtX(m)))
		}
		if len(rs2) > 0 {
			var each []string
			for i := range rs2 {
				each = append(each, fmt.Sprintf("%s (CPU/datagram %s)", fmtX(rs2[i]), fmtX(cpu2[i])))
			}
			m, mc := median(rs2), median(cpu2)
			r.set(key{scen: scLoopback, n: nsocks, target: lbDemux2R, shape: lbTwoReaders, m: ratioX}, m)
			r.set(key{scen: scLoopback, n: nsocks, target: lbDemux2R, shape: lbTwoCPU, m: ratioX}, mc)
			readerNotes = append(readerNotes, fmt.Sprintf("%d sockets: %s (median %s, CPU/datagram %s)", nsocks,
				strings.Join(each, ", "), fmtX(m), fmtX(mc)))
		}
	}
	r.printf("%s\n", tb)
	if len(roundNotes) > 0 {
		r.printf("udpdemux's received/s over the kernel's, round by round:\n\n")
		for _, n := range roundNotes {
			r.printf("- %s\n", n)
		}
		r.printf("\n")
	}
	if len(readerNotes) > 0 {
		r.printf("udpdemux with 2 readers (`serve.Options.Readers`: two kernel sockets in an SO_REUSEPORT group, " +
			"each read by its own goroutine) over udpdemux with 1, round by round, received/s (and CPU per datagram):\n\n")
		for _, n := range readerNotes {
			r.printf("- %s\n", n)
		}
		r.printf("\n")
	}
	if len(limits) > 0 {
		r.printf("What limited udpdemux's throughput, row by row, from the figures above:\n\n")
		for _, l := range limits {
			r.printf("- %s\n", l)
		}
		r.printf("\n")
	}
}

// loopbackLimit says what limited udpdemux's receiver in one row: the
// sender, if the receiver kept up with it (it finished within a tenth of
// the send time); else the table, if its lookups took most of the
// receiver's CPU; else the system calls and the kernel's receive path.
func loopbackLimit(nsocks int, cpuPerDgram, lookupNs float64, send, recv time.Duration) string {
	share := lookupNs / cpuPerDgram
	what := "the system calls and the kernel's receive path"
	if share > 0.5 {
		what = "the table"
	}
	s := fmt.Sprintf("%d sockets: the receiver spent %s of CPU per datagram, the table's lookups %s of it (%.1f %%)",
		nsocks, fmtNs(cpuPerDgram), fmtNs(lookupNs), 100*share)
	if recv <= send+send/10 {
		return s + "; it kept up with the sender, whose system calls set the rate; of the receiver's own cost, " + what + " took the most."
	}
	return s + "; it fell behind the sender: " + what + " limited it."
}

func (r *runner) loopbackGoals() []goal {
	top := loopbackRows[0]
	k := key{scen: scLoopback, n: top, target: lbDemux, m: ratioX}
	k.shape = lbVsKernel
	vs := r.val(k)
	k.shape = lbLookupShare
	share := r.val(k)
	var wrong, rows []place
	for _, n := range loopbackRows {
		rows = append(rows, place{fmt.Sprintf("%d sockets", n),
			r.val(key{scen: scLoopback, n: n, target: lbDemux, shape: lbVsKernel, m: ratioX})})
		for _, recv := range []string{lbDemux, lbKernel, lbDemux2R} {
			wrong = append(wrong, place{fmt.Sprintf("%d sockets, %s", n, recv),
				r.val(key{scen: scLoopback, n: n, target: recv, m: wrongCount})})
		}
	}
	pct := func(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }
	count := func(x float64) string { return fmtInt(int(x)) }
	return []goal{
		limit(fmt.Sprintf("Loopback, %d sockets: udpdemux through the adapter receives at least as many datagrams per second as the kernel", top),
			[]place{{"", vs}}, false, 1, fmtX),
		limit(fmt.Sprintf("Loopback, %d sockets: the table's lookups under 5 %% of the receiver's CPU time", top),
			[]place{{"", share}}, true, 0.05, pct),
		limit("Loopback: no datagram delivered to the wrong socket (every row, every receiver)", wrong, true, 0, count),
		limit("Loopback, every row: udpdemux through the adapter receives at least as many datagrams per second as the kernel",
			rows, false, 1, fmtX),
		limit(fmt.Sprintf("Loopback, %d sockets: udpdemux with 2 readers receives at least 1.8× the datagrams per second of 1 reader", top),
			[]place{{"", r.val(key{scen: scLoopback, n: top, target: lbDemux2R, shape: lbTwoReaders, m: ratioX})}}, false, 1.8, fmtX),
	}
}

func parseStrategy(s string) (demux.Strategy, error) {
	for _, st := range []demux.Strategy{demux.Hybrid, demux.OnePhase, demux.TwoPhase} {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown strategy %q (hybrid, one-phase, two-phase)", s)
}

// loopbackRun runs one row with one receiver.
func loopbackRun(recv string, nsocks, ndgrams, payload int, strategy demux.Strategy) (lbResult, error) {
	var res lbResult
	port, err := freePort()
	if err != nil {
		return res, err
	}
	var rc receiver
	switch recv {
	case lbDemux:
		rc, err = newDemuxReceiver(nsocks, port, strategy, 1)
	case lbDemux2R:
		rc, err = newDemuxReceiver(nsocks, port, strategy, 2)
	default:
		rc, err = newKernelReceiver(nsocks, port)
	}
	if err != nil {
		return res, err
	}
	defer rc.stop()
	runtime.GC() // the receivers' setup garbage is not theirs to collect during the run
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d %d", senderEnv, nsocks, ndgrams, payload, port))
	cmd.Stderr = os.Stderr
	cpu0 := ownCPU()
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("sender: %w", err)
	}
	exited := time.Now()
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return res, fmt.Errorf("sender said %q", out)
	}
	res.sent, _ = strconv.Atoi(f[0])
	ns, _ := strconv.ParseInt(f[1], 10, 64)
	res.sendTime = time.Duration(ns)
	// Drain: wait until every datagram arrived or none came for 200 ms.
	last, lastAt := uint64(0), time.Now()
	for {
		got, _ := rc.received()
		if got != last {
			last, lastAt = got, time.Now()
		}
		if got >= uint64(res.sent) || time.Since(lastAt) > 200*time.Millisecond {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	res.cpu = ownCPU() - cpu0
	res.got, res.wrong = rc.received()
	res.elapsed = res.sendTime + max(0, lastAt.Sub(exited))
	res.lookupNs = rc.lookupCost(nsocks, port)
	return res, nil
}

// freePort returns a UDP port that is free on every address now.
func freePort() (int, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

// ownCPU returns this process's user and system CPU time.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fmtDur formats a wall time in ms or s.
func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", d.Seconds()*1e3)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}
