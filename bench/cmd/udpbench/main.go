// Command udpbench runs the udpdemux benchmark suite: lookups under the
// one-phase, two-phase and hybrid strategies on the shapes of the 2009
// netdev discussions, bind(0) by occupancy, parallel lookups, and the seed
// thread's reproducer, each against gVisor's netstack and (for lookups) a
// plain Go map as the floor, and (for bind(0)) the real Linux kernel in a
// network namespace when it can make one.
//
// From the repository root:
//
//	go -C bench run ./cmd/udpbench            # full run, a few minutes
//	go -C bench run ./cmd/udpbench -quick     # small version, for CI
//	go -C bench run ./cmd/udpbench -scenarios 1,7
//
// It shows progress on stderr, prints Markdown tables on stdout, and
// writes RESULTS.md and SVG plots into the -out directory (by default the
// bench directory for a full run and a temporary directory for -quick, so
// that a quick run never overwrites the committed results). It exits with
// status 1 if any contender gave a wrong answer or failed.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// config is what the flags set.
type config struct {
	quick     bool
	scenarios []int
	out       string
	benchtime time.Duration
	runs      int
	seed      uint64
	kernel    bool
}

// scenario is one numbered part of the suite.
type scenario struct {
	num   int
	title string
	run   func(*runner)
}

var scenarios = []scenario{
	{1, "Same port, many addresses", (*runner).s1},
	{2, "One socket per port", (*runner).s2},
	{3, "Sweep of sockets per port", (*runner).s3},
	{4, "Mixed service", (*runner).s4},
	{5, "Scale", (*runner).s5},
	{6, "Parallel lookups", (*runner).s6},
	{7, "bind(0) by occupancy", (*runner).s7},
}

func main() {
	testing.Init()
	var (
		c      config
		scen   = flag.String("scenarios", "1,2,3,4,5,6,7", "comma-separated scenarios to run")
		bt     = flag.Duration("benchtime", 0, "time per measurement (default 200ms, 20ms with -quick)")
		runs   = flag.Int("runs", 0, "measurements per benchmark, the median is reported (default 3, 1 with -quick)")
		seed   = flag.Uint64("seed", 2009, "seed of the shapes' random addresses, ports and lookup orders")
		kernel = flag.Bool("kernel", true, "measure the Linux kernel's bind(0) in a network namespace (needs root)")
	)
	flag.BoolVar(&c.quick, "quick", false, "run a small version of everything (for CI)")
	flag.StringVar(&c.out, "out", "", "directory for RESULTS.md and the plots (default . or, with -quick, a temporary directory)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: udpbench [-quick] [-scenarios 1,2,...] [-out dir]\n")
		for _, s := range scenarios {
			fmt.Fprintf(flag.CommandLine.Output(), "  scenario %d: %s\n", s.num, s.title)
		}
		fmt.Fprintf(flag.CommandLine.Output(), "flags:\n")
		flag.VisitAll(func(f *flag.Flag) {
			if !strings.HasPrefix(f.Name, "test.") {
				fmt.Fprintf(flag.CommandLine.Output(), "  -%s\t%s\n", f.Name, f.Usage)
			}
		})
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	for _, f := range strings.Split(*scen, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > len(scenarios) {
			fmt.Fprintf(os.Stderr, "udpbench: bad scenario %q (1 to %d)\n", f, len(scenarios))
			os.Exit(2)
		}
		if !slices.Contains(c.scenarios, n) {
			c.scenarios = append(c.scenarios, n)
		}
	}
	slices.Sort(c.scenarios)
	c.benchtime, c.runs, c.seed, c.kernel = *bt, *runs, *seed, *kernel
	if c.benchtime == 0 {
		c.benchtime = 200 * time.Millisecond
		if c.quick {
			c.benchtime = 20 * time.Millisecond
		}
	}
	if c.runs == 0 {
		c.runs = 3
		if c.quick {
			c.runs = 1
		}
	}
	if c.out == "" {
		c.out = "."
		if c.quick {
			c.out = filepath.Join(os.TempDir(), "udpbench-quick")
		}
	}
	if err := flag.Set("test.benchtime", c.benchtime.String()); err != nil {
		fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(c.out, "plots"), 0o755); err != nil {
		fatal(err)
	}
	r := newRunner(c)
	for _, s := range scenarios {
		if slices.Contains(c.scenarios, s.num) {
			r.begin(s.num, s.title)
			s.run(r)
		}
	}
	r.end()
	r.others = othersSince(r.cpu)
	r.goals()
	if err := r.writeResults(); err != nil {
		fatal(err)
	}
	if len(r.errs) > 0 {
		fmt.Fprintf(os.Stderr, "udpbench: %d failures:\n", len(r.errs))
		for _, e := range r.errs {
			fmt.Fprintf(os.Stderr, "  %s\n", e)
		}
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "udpbench: %v\n", err)
	os.Exit(1)
}

// section is a part of the report.
type section struct {
	title string
	body  strings.Builder
	cpu   cpuSnap // at the start of the scenario
}

// runner runs the scenarios and collects the report.
type runner struct {
	c        config
	start    time.Time
	sections []*section
	cur      *section
	vals     map[string]float64 // figures the goals are judged on
	errs     []string
	plots    []string // file names under plots/
	notes    []string
	cpu      cpuSnap // at the start of the run
	load     float64 // 1-minute load average at the start
	others   float64 // CPUs other processes kept busy during the run
}

func newRunner(c config) *runner {
	r := &runner{c: c, start: time.Now(), vals: map[string]float64{}, cpu: takeSnap(), load: loadAvg()}
	if r.load > 0.5 {
		r.progress("warning: the 1-minute load average is %.2f: other work will disturb the measurements", r.load)
	}
	return r
}

// end closes the current section with a note of the CPU time that other
// processes took during it, when it is enough to matter.
func (r *runner) end() {
	if r.cur == nil || !r.cur.cpu.ok {
		return
	}
	if o := othersSince(r.cur.cpu); o >= 0.05 {
		r.printf("_Other processes kept %.2f of the %d CPUs busy on average during this scenario: its figures are disturbed._\n\n",
			o, runtime.NumCPU())
	}
}

// begin starts the section of scenario n.
func (r *runner) begin(n int, title string) {
	r.end()
	r.cur = &section{title: fmt.Sprintf("%d. %s", n, title), cpu: takeSnap()}
	r.sections = append(r.sections, r.cur)
	r.progress("scenario %d: %s", n, title)
	fmt.Printf("\n## %s\n\n", r.cur.title)
}

// printf adds Markdown to the current section and prints it.
func (r *runner) printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.cur.body.WriteString(s)
	fmt.Print(s)
}

// progress prints a progress line on stderr.
func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// fail records a failure; the run goes on, and exits with status 1.
func (r *runner) fail(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.errs = append(r.errs, s)
	r.progress("FAIL: %s", s)
}

// meas is one benchmark's result: the median of the runs.
type meas struct {
	ns     float64 // per operation
	allocs float64 // per operation
	ok     bool
}

// none is a missing measurement.
var none = meas{ns: nan()}

func nan() float64 { v := 0.0; return v / v }

// bench measures f c.runs times and keeps the median run.
func (r *runner) bench(label string, f func(*testing.B)) meas {
	type one struct{ ns, allocs float64 }
	var rs []one
	for range r.c.runs {
		res := testing.Benchmark(f)
		if res.N == 0 {
			r.fail("%s: the benchmark failed", label)
			return none
		}
		rs = append(rs, one{float64(res.T.Nanoseconds()) / float64(res.N), float64(res.MemAllocs) / float64(res.N)})
	}
	slices.SortFunc(rs, func(a, b one) int {
		switch {
		case a.ns < b.ns:
			return -1
		case a.ns > b.ns:
			return 1
		}
		return 0
	})
	m := rs[len(rs)/2]
	r.progress("  %-52s %12s/op %6.1f allocs/op", label, fmtNs(m.ns), m.allocs)
	return meas{ns: m.ns, allocs: m.allocs, ok: true}
}

// cpuModel returns the CPU model from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// kernelRelease returns the running kernel's release.
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// command returns the command line that reproduces this run.
func (r *runner) command() string {
	args := []string{"go", "-C", "bench", "run", "./cmd/udpbench"}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "out" || strings.HasPrefix(f.Name, "test.") {
			return
		}
		if f.Name == "quick" {
			args = append(args, "-quick")
			return
		}
		args = append(args, "-"+f.Name, f.Value.String())
	})
	return strings.Join(args, " ")
}

// libraryRevision returns the git revision of the repository, if any.
func libraryRevision() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown (not a git checkout, or no commit)"
	}
	rev := strings.TrimSpace(string(out))
	if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
		rev += " (with uncommitted changes)"
	}
	return rev
}

// writeResults writes RESULTS.md.
func (r *runner) writeResults() error {
	var b strings.Builder
	b.WriteString("# udpdemux benchmark results\n\n")
	b.WriteString("Written by `udpbench` (bench/cmd/udpbench); do not edit by hand: run the command again.\n\n")
	kind := "full run"
	if r.c.quick {
		kind = "quick run (-quick: reduced sizes, short measurements; not for comparison)"
	}
	fmt.Fprintf(&b, "- Command (from the repository root): `%s`\n", r.command())
	fmt.Fprintf(&b, "- Kind: %s; scenarios %s\n", kind, joinInts(r.c.scenarios))
	fmt.Fprintf(&b, "- Date: %s\n", r.start.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- Go: %s %s/%s, GOMAXPROCS %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "- CPU: %s, %d logical CPUs; Linux %s\n", cpuModel(), runtime.NumCPU(), kernelRelease())
	fmt.Fprintf(&b, "- Library revision: %s\n", libraryRevision())
	switch {
	case r.others < 0:
		b.WriteString("- Other load: unknown (no /proc/stat)\n")
	default:
		fmt.Fprintf(&b, "- Other load: the 1-minute load average was %.2f at the start; other processes kept %.2f of the %d CPUs busy on average during the run%s\n",
			r.load, r.others, runtime.NumCPU(), map[bool]string{true: " (**the figures are disturbed: run again on an idle machine**)", false: ""}[r.others >= 0.05])
	}
	fmt.Fprintf(&b, "- Each figure is the median of %d measurements of %v (Go's testing.Benchmark with b.Loop); the run took %s.\n",
		r.c.runs, r.c.benchtime, time.Since(r.start).Round(time.Second))
	b.WriteString("- Contenders: udpdemux's `demux.Table` under `OnePhase`, `TwoPhase` and `Hybrid`; gVisor's netstack " +
		"(`stack.Stack.FindTransportEndpoint` after `RegisterTransportEndpoint`, `ports.PortManager.ReservePort`), " +
		"gvisor.dev/gvisor " + gvisorVersion() + "; a Go map probed once with the receiving socket's exact key (the floor); " +
		"for bind(0), the Linux kernel through syscalls in a network namespace.\n")
	b.WriteString("- Lookups go to the bound sockets in a random order (a precomputed list of up to 65 536 datagrams, cycled), " +
		"and every contender is checked to find the right socket before it is timed.\n")
	if len(r.errs) > 0 {
		b.WriteString("\n**Failures in this run:**\n\n")
		for _, e := range r.errs {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	for _, s := range r.sections {
		fmt.Fprintf(&b, "\n## %s\n\n%s", s.title, s.body.String())
	}
	path := filepath.Join(r.c.out, "RESULTS.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	r.progress("wrote %s", path)
	return nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
