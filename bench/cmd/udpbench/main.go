// Command udpbench runs the udpdemux benchmark suite: lookups under the
// one-phase, two-phase and hybrid strategies on the shapes of the 2009
// netdev discussions, bind(0) by occupancy, parallel lookups, and the
// reproducer of the bind(0) livelock, each against gVisor's netstack and
// (for lookups) a plain Go map as the floor, and (for bind(0)) the real
// Linux kernel in a network namespace when it can make one; and, with the
// default Config's growing tables, connected sockets on one port, tables
// of up to 1 000 000 sockets, a large SO_REUSEPORT group, resizing under
// lookups, batch lookups and the port-aliasing attack. It then judges the
// project's performance goals on the figures of the run.
//
// From the repository root:
//
//	go -C bench run ./cmd/udpbench                      # full run; writes bench/out/
//	go -C bench run ./cmd/udpbench -quick               # small version, for CI; writes bench/out/quick/
//	go -C bench run ./cmd/udpbench -scenarios same-port,bind0
//	go -C bench run ./cmd/udpbench -write-results       # full run, and regenerate the committed bench/RESULTS.md and bench/plots/
//
// It shows progress on stderr, prints the Markdown report on stdout (with
// -quick, only the goals' verdicts), and writes RESULTS.md and SVG plots
// into the -out directory, which git ignores, so that a run never dirties
// a checkout. The committed record, bench/RESULTS.md and bench/plots/, is
// rewritten only with -write-results. It exits with status 1 if any
// contender gave a wrong answer or failed.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// config is what the flags set.
type config struct {
	quick     bool
	verbose   bool
	write     bool // -write-results
	scenarios []scenarioID
	out       string
	benchtime time.Duration
	runs      int
	seed      uint64
	kernel    bool
	loopback  loopbackFlags
}

func main() {
	testing.Init()
	c, err := parseFlags()
	if err != nil {
		fmt.Fprintf(os.Stderr, "udpbench: %v\n", err)
		os.Exit(2)
	}
	if err := flag.Set("test.benchtime", c.benchtime.String()); err != nil {
		fatal(err)
	}
	r := newRunner(c)
	for _, s := range runnable() {
		if slices.Contains(c.scenarios, s.id) {
			r.begin(s)
			s.run(r)
		}
	}
	r.end()
	r.others = othersSince(r.cpu)
	r.goals()
	for _, dir := range r.outputs() {
		if err := r.writeResults(dir); err != nil {
			fatal(err)
		}
	}
	if len(r.errs) > 0 {
		fmt.Fprintf(os.Stderr, "udpbench: %d failures:\n", len(r.errs))
		for _, e := range r.errs {
			fmt.Fprintf(os.Stderr, "  %s\n", e)
		}
		os.Exit(1)
	}
}

// parseFlags reads the command line.
func parseFlags() (config, error) {
	var (
		c      config
		names  []string
		scen   = flag.String("scenarios", "all", "comma-separated scenario names to run, or all")
		bt     = flag.Duration("benchtime", 0, "time per measurement (default 200ms, 20ms with -quick)")
		runs   = flag.Int("runs", 0, "measurements per benchmark, the median is reported (default 3, 1 with -quick)")
		seed   = flag.Uint64("seed", 2009, "seed of the shapes' random addresses, ports and lookup orders")
		kernel = flag.Bool("kernel", true, "measure the Linux kernel's bind(0) in a network namespace (needs root)")
	)
	for _, s := range runnable() {
		names = append(names, string(s.id))
	}
	flag.BoolVar(&c.quick, "quick", false, "run a small version of everything (for CI; prints only the goals' verdicts)")
	flag.BoolVar(&c.verbose, "v", false, "report every measurement on stderr (the default without -quick)")
	flag.BoolVar(&c.write, "write-results", false, "also write RESULTS.md and plots/ into the bench directory, the committed record (full runs of every scenario only)")
	c.loopback.define()
	flag.StringVar(&c.out, "out", "", "directory for RESULTS.md and the plots (default out, or out/quick with -quick; git ignores bench/out)")
	flag.Usage = func() {
		w := flag.CommandLine.Output()
		fmt.Fprintf(w, "usage: udpbench [-quick] [-scenarios name,...] [-out dir] [-write-results]\nscenarios:\n")
		for _, s := range runnable() {
			fmt.Fprintf(w, "  %-16s %s\n", s.id, s.title)
		}
		fmt.Fprintf(w, "flags:\n")
		flag.VisitAll(func(f *flag.Flag) {
			if !strings.HasPrefix(f.Name, "test.") {
				fmt.Fprintf(w, "  -%s\t%s\n", f.Name, f.Usage)
			}
		})
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *scen == "all" {
		for _, s := range runnable() {
			c.scenarios = append(c.scenarios, s.id)
		}
	} else {
		for _, f := range strings.Split(*scen, ",") {
			id := scenarioID(strings.TrimSpace(f))
			if !slices.Contains(names, string(id)) {
				return c, fmt.Errorf("unknown scenario %q (one of %s, or all)", id, strings.Join(names, ", "))
			}
			if !slices.Contains(c.scenarios, id) {
				c.scenarios = append(c.scenarios, id)
			}
		}
	}
	c.verbose = c.verbose || !c.quick
	if c.write {
		if c.quick || len(c.scenarios) != len(runnable()) {
			return c, fmt.Errorf("-write-results records a full run of every scenario: drop -quick and -scenarios")
		}
		if _, err := os.Stat(filepath.Join("cmd", "udpbench", "main.go")); err != nil {
			return c, fmt.Errorf("-write-results must run in the bench directory (go -C bench run ./cmd/udpbench -write-results)")
		}
	}
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
		c.out = "out"
		if c.quick {
			c.out = filepath.Join("out", "quick")
		}
	}
	for _, dir := range []string{c.out, "."} {
		if dir == "." && !c.write {
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, "plots"), 0o755); err != nil {
			return c, err
		}
	}
	return c, nil
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
	vals     map[key]float64 // figures the goals are judged on
	errs     []string
	plots    []plotFile
	notes    []string
	cpu      cpuSnap // at the start of the run
	load     float64 // 1-minute load average at the start
	others   float64 // CPUs other processes kept busy during the run
	echo     bool    // print the report on stdout as it is written
	// measured, if not nil, is told the label of each measurement as it
	// begins; tests read the order of the rounds from it.
	measured func(label string)
}

func newRunner(c config) *runner {
	r := &runner{c: c, start: time.Now(), vals: map[key]float64{}, cpu: takeSnap(), load: loadAvg(), echo: !c.quick}
	if r.load > 0.5 {
		r.progress("warning: the 1-minute load average is %.2f: other work will disturb the measurements", r.load)
	}
	return r
}

// outputs returns the directories the report goes to.
func (r *runner) outputs() []string {
	if r.c.write {
		return []string{r.c.out, "."}
	}
	return []string{r.c.out}
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

// begin starts the section of scenario s.
func (r *runner) begin(s scenario) {
	r.end()
	r.cur = &section{title: s.title, cpu: takeSnap()}
	r.sections = append(r.sections, r.cur)
	r.progress("scenario %s: %s", s.id, s.title)
	if r.echo {
		fmt.Printf("\n## %s\n\n", r.cur.title)
	}
}

// printf adds Markdown to the current section and prints it.
func (r *runner) printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.cur.body.WriteString(s)
	if r.echo {
		fmt.Print(s)
	}
}

// progress prints a progress line on stderr.
func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// detail prints a progress line on stderr unless the run is quiet (-quick
// without -v).
func (r *runner) detail(format string, args ...any) {
	if r.c.verbose {
		r.progress(format, args...)
	}
}

// fail records a failure; the run goes on, and exits with status 1.
func (r *runner) fail(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.errs = append(r.errs, s)
	r.progress("FAIL: %s", s)
}
