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
	// Each receiver alone, its queues filled while it was stopped.
	lbAloneVsKernel   = "alone: received/s ÷ kernel's"
	lbAloneTwoReaders = "alone: received/s, 2 readers ÷ 1"
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
	elapsed    time.Duration // from the first send (alone: the receiver's SIGCONT) to the last datagram received
	cpu        time.Duration // the receiver's process's CPU time meanwhile
	lookupNs   float64       // a lookup's cost, measured after the run (NaN: the kernel's)
}

// Datagrams per run: a row with few sockets sends more rounds, so that
// each run lasts long enough to tell receivers apart (at 2 000 per socket,
// the 8-socket row's rounds gave ratios from 0.5× to 1.3×).
const (
	lbMinTotal   = 256_000 // each tester run, at least
	lbAloneTotal = 256_000 // each run of a receiver alone
)

// lbRow is a row's runs in one mode, by receiver, and its rounds'
// ratios.
type lbRow struct {
	runs                         map[string][]lbResult
	wrong                        [3]uint64
	impossible                   int       // runs discarded for more CPUs busy than the machine has
	vsKernel, twoReaders, twoCPU []float64 // the rounds' ratios, in run order
}

// lbRounds runs each receiver on one row, r.c.runs times, in rounds that
// start one receiver later each time, so that a change of the machine's
// load between rounds, or what the first run of a round pays (a cold
// sender, a cache the other left), falls on each receiver alike.
func (r *runner) lbRounds(run func(func()), nsocks, per int, strategy demux.Strategy, alone bool) lbRow {
	row := lbRow{runs: map[string][]lbResult{}}
	for round := range r.c.runs {
		var dps, cpuPer [3]float64
		for j := range lbReceivers {
			i := (j + round) % len(lbReceivers)
			recv := lbReceivers[i]
			r.progress("  loopback %d sockets × %d datagrams%s: %s", nsocks, per, map[bool]string{true: ", alone"}[alone], recv)
			var res lbResult
			var err error
			for try := 0; ; try++ {
				run(func() { res, err = loopbackRun(recv, nsocks, per, r.c.loopback.payload, strategy, alone) })
				// A receiver cannot keep more CPUs busy than the machine
				// has: a run that says so timed the wrong span (seen in
				// a full run: a kernel receiver alone at 3.9 CPUs), and
				// is run again. Not with -quick, whose runs are too short
				// for the check: the resumed process's fixed costs alone
				// can exceed their span.
				if err != nil || r.c.quick || float64(res.cpu) <= 1.05*float64(runtime.NumCPU())*float64(res.elapsed) {
					break
				}
				row.impossible++
				r.progress("  loopback %d sockets, %s: %.2f CPUs busy over the run's span, more than the machine has: run again",
					nsocks, recv, res.cpu.Seconds()/res.elapsed.Seconds())
				if try == 2 {
					err = fmt.Errorf("%d runs in a row kept more CPUs busy than the machine has", try+1)
					break
				}
			}
			if err != nil {
				r.fail("loopback %d × %d, %s: %v", nsocks, per, recv, err)
				continue
			}
			if res.wrong > 0 {
				r.fail("loopback %d × %d, %s: %d datagrams reached the wrong socket", nsocks, per, recv, res.wrong)
			}
			row.wrong[i] += res.wrong
			row.runs[recv] = append(row.runs[recv], res)
			dps[i] = res.rate()
			cpuPer[i] = float64(res.cpu.Nanoseconds()) / float64(max(res.got, 1))
		}
		if dps[0] > 0 && dps[1] > 0 {
			row.vsKernel = append(row.vsKernel, dps[0]/dps[1])
		}
		if dps[0] > 0 && dps[2] > 0 {
			row.twoReaders = append(row.twoReaders, dps[2]/dps[0])
			row.twoCPU = append(row.twoCPU, cpuPer[2]/cpuPer[0])
		}
	}
	return row
}

// lbReceivers are the scenario's receivers, in the order of a row's
// first round.
var lbReceivers = []string{lbDemux, lbKernel, lbDemux2R}

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
	ndgrams, minTotal, aloneTotal := r.c.loopback.ndgrams, lbMinTotal, lbAloneTotal
	if r.c.quick {
		ndgrams, minTotal, aloneTotal = min(ndgrams, 20), 0, 0
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
	r.printf("A sender process sends %d datagrams (more where the row has few sockets: at least %s in all) of %d bytes to each of *nsocks* addresses 127.1.x.y on one port, "+
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
		"lookups. On this scenario's machine the sender and the receiver share the CPUs, and while the sender sets the "+
		"rate, every receiver receives at it: the second table measures each receiver alone. Every datagram's payload names "+
		"its destination, and a datagram that reached another socket counts as wrong.\n\n",
		ndgrams, fmtInt(minTotal), max(r.c.loopback.payload, 4), senderSockets, where, strategy, times(r.c.runs))
	var limits []string // what limited each row, from its figures
	var roundNotes, readerNotes, aloneNotes []string
	tb := newTable("nsocks", "ndgrams", "payload", "receiver", "send time", "received", "drops", "wrong",
		"received/s", "CPU/datagram", "lookup share")
	ta := newTable("nsocks", "ndgrams", "receiver", "received", "drops", "wrong", "received/s", "CPU/datagram", "CPUs busy")
	for _, nsocks := range rows {
		per := max(ndgrams, (minTotal+nsocks-1)/nsocks)
		con := r.lbRounds(run, nsocks, per, strategy, false)
		perAlone := (aloneTotal + nsocks - 1) / nsocks
		if aloneTotal == 0 {
			perAlone = ndgrams
		}
		alone := r.lbRounds(run, nsocks, perAlone, strategy, true)
		for i, recv := range lbReceivers {
			k := key{scen: scLoopback, n: nsocks, target: recv, m: wrongCount}
			r.set(k, float64(con.wrong[i]+alone.wrong[i]))
			if res, ok := medianRun(con.runs[recv]); ok {
				perDgram := float64(res.cpu.Nanoseconds()) / float64(max(res.got, 1))
				share := "—"
				if !math.IsNaN(res.lookupNs) {
					sh := res.lookupNs * float64(res.got) / float64(res.cpu.Nanoseconds())
					share = fmt.Sprintf("%.1f %% (%s)", 100*sh, fmtNs(res.lookupNs))
					r.set(key{scen: scLoopback, n: nsocks, target: recv, shape: lbLookupShare, m: ratioX}, sh)
					if recv == lbDemux {
						limits = append(limits, loopbackLimit(nsocks, perDgram, res.lookupNs, res.sendTime, res.elapsed))
					}
				}
				tb.add(strconv.Itoa(nsocks), fmtInt(per), strconv.Itoa(max(r.c.loopback.payload, 4)), recv,
					fmtDur(res.sendTime), fmtInt(int(res.got)), fmtInt(res.sent-int(res.got)),
					fmtInt(int(con.wrong[i])), fmtRate(res.rate()), fmtNs(perDgram), share)
			}
			if res, ok := medianRun(alone.runs[recv]); ok {
				perDgram := float64(res.cpu.Nanoseconds()) / float64(max(res.got, 1))
				ta.add(strconv.Itoa(nsocks), fmtInt(perAlone), recv, fmtInt(int(res.got)), fmtInt(res.sent-int(res.got)),
					fmtInt(int(alone.wrong[i])), fmtRate(res.rate()), fmtNs(perDgram),
					fmt.Sprintf("%.2f", res.cpu.Seconds()/res.elapsed.Seconds()))
			}
		}
		if len(con.vsKernel) > 0 {
			m := median(slices.Clone(con.vsKernel))
			r.set(key{scen: scLoopback, n: nsocks, target: lbDemux, shape: lbVsKernel, m: ratioX}, m)
			roundNotes = append(roundNotes, fmt.Sprintf("%d sockets: %s (median %s)", nsocks, fmtXs(con.vsKernel), fmtX(m)))
		}
		if len(con.twoReaders) > 0 {
			m, mc := median(slices.Clone(con.twoReaders)), median(slices.Clone(con.twoCPU))
			r.set(key{scen: scLoopback, n: nsocks, target: lbDemux2R, shape: lbTwoReaders, m: ratioX}, m)
			r.set(key{scen: scLoopback, n: nsocks, target: lbDemux2R, shape: lbTwoCPU, m: ratioX}, mc)
			readerNotes = append(readerNotes, fmt.Sprintf("%d sockets: %s (median %s, CPU/datagram %s)", nsocks,
				fmtXsCPU(con.twoReaders, con.twoCPU), fmtX(m), fmtX(mc)))
		}
		if len(alone.vsKernel) > 0 && len(alone.twoReaders) > 0 {
			mk, m, mc := median(slices.Clone(alone.vsKernel)), median(slices.Clone(alone.twoReaders)), median(slices.Clone(alone.twoCPU))
			r.set(key{scen: scLoopback, n: nsocks, target: lbDemux, shape: lbAloneVsKernel, m: ratioX}, mk)
			r.set(key{scen: scLoopback, n: nsocks, target: lbDemux2R, shape: lbAloneTwoReaders, m: ratioX}, m)
			aloneNotes = append(aloneNotes, fmt.Sprintf("%d sockets: udpdemux ÷ kernel %s (median %s); 2 readers ÷ 1 %s (median %s, CPU/datagram %s); runs discarded and run again: %d",
				nsocks, fmtXs(alone.vsKernel), fmtX(mk), fmtXsCPU(alone.twoReaders, alone.twoCPU), fmtX(m), fmtX(mc), alone.impossible+con.impossible))
		}
	}
	r.printf("%s\n", tb)
	notes := func(head string, ns []string) {
		if len(ns) == 0 {
			return
		}
		r.printf("%s\n\n", head)
		for _, n := range ns {
			r.printf("- %s\n", n)
		}
		r.printf("\n")
	}
	notes("udpdemux's received/s over the kernel's, round by round:", roundNotes)
	notes("udpdemux with 2 readers (`serve.Options.Readers`: two kernel sockets in an SO_REUSEPORT group, "+
		"each read by its own goroutine) over udpdemux with 1, round by round, received/s (and CPU per datagram):", readerNotes)
	notes("What limited udpdemux's throughput, row by row, from the figures above:", limits)
	r.printf("**Each receiver alone.** The same receivers, each on its own, in a process of its own: the runner stops that "+
		"process (SIGSTOP) while the sender sends %s datagrams, *ndgrams* to each socket, into receive buffers large enough to hold them "+
		"(%s per datagram, SO_RCVBUFFORCE), and resumes it (SIGCONT) once the sender is done; received/s runs from that "+
		"moment to the last datagram received, and *CPUs busy* is the receiver process's CPU time over that span. The kernel's "+
		"receive path, its lookup included, ran during the send, so the kernel receiver's time holds only its reads, "+
		"while udpdemux's holds its reads and its table's lookups. The kernel receiver's *nsocks* goroutines spread over "+
		"every CPU; udpdemux reads with one goroutine per reader. A run whose receiver kept more CPUs busy than the machine "+
		"has timed the wrong span: it is discarded and run again (the count is in the notes below the table).\n\n",
		fmtInt(aloneTotal), fmtBytes(float64(drainTruesize)))
	r.printf("%s\n", ta)
	notes("Round by round, receivers alone:", aloneNotes)
}

// medianRun returns the run of the median rate, which stands for its
// receiver in the tables.
func medianRun(runs []lbResult) (lbResult, bool) {
	if len(runs) == 0 {
		return lbResult{}, false
	}
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b lbResult) int { return cmp.Compare(a.rate(), b.rate()) })
	return runs[len(runs)/2], true
}

// fmtXs formats ratios, comma-separated.
func fmtXs(xs []float64) string {
	var each []string
	for _, x := range xs {
		each = append(each, fmtX(x))
	}
	return strings.Join(each, ", ")
}

// fmtXsCPU formats ratios with their CPU-per-datagram ratios.
func fmtXsCPU(xs, cpu []float64) string {
	var each []string
	for i := range xs {
		each = append(each, fmt.Sprintf("%s (CPU/datagram %s)", fmtX(xs[i]), fmtX(cpu[i])))
	}
	return strings.Join(each, ", ")
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
		limit(fmt.Sprintf("Loopback, %d sockets, each receiver alone: udpdemux with 2 readers receives at least 1.8× the datagrams per second of 1 reader", top),
			[]place{{"", r.val(key{scen: scLoopback, n: top, target: lbDemux2R, shape: lbAloneTwoReaders, m: ratioX})}}, false, 1.8, fmtX),
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

// loopbackRun runs one row with one receiver: with alone, as
// loopbackAlone does; else the receiver in this process, the sender
// beside it.
func loopbackRun(recv string, nsocks, ndgrams, payload int, strategy demux.Strategy, alone bool) (lbResult, error) {
	if alone {
		return loopbackAlone(recv, nsocks, ndgrams, payload, strategy)
	}
	var res lbResult
	port, err := freePort()
	if err != nil {
		return res, err
	}
	var rc receiver
	switch recv {
	case lbDemux:
		rc, err = newDemuxReceiver(nsocks, port, strategy, 1, rmemDefault())
	case lbDemux2R:
		rc, err = newDemuxReceiver(nsocks, port, strategy, 2, rmemDefault())
	default:
		rc, err = newKernelReceiver(nsocks, port, rmemDefault())
	}
	if err != nil {
		return res, err
	}
	defer rc.stop()
	runtime.GC() // the receivers' setup garbage is not theirs to collect during the run
	cpu0 := ownCPU()
	if res.sent, res.sendTime, err = send(nsocks, ndgrams, payload, port); err != nil {
		return res, err
	}
	exited := time.Now()
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
