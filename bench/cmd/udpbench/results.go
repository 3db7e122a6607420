package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

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
		switch {
		case f.Name == "out" || f.Name == "v" || f.Name == "write-results" || strings.HasPrefix(f.Name, "test."):
		case f.Name == "quick":
			args = append(args, "-quick")
		default:
			args = append(args, "-"+f.Name, f.Value.String())
		}
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

// writeResults writes RESULTS.md into dir.
func (r *runner) writeResults(dir string) error {
	var b strings.Builder
	b.WriteString("# udpdemux benchmark results\n\n")
	b.WriteString("Written by `udpbench` (bench/cmd/udpbench) with `-write-results`; do not edit by hand: run the command again.\n\n")
	kind := "full run"
	if r.c.quick {
		kind = "quick run (-quick: reduced sizes, short measurements; not for comparison)"
	}
	var ids []string
	for _, id := range r.c.scenarios {
		ids = append(ids, string(id))
	}
	fmt.Fprintf(&b, "- Command (from the repository root): `%s`\n", r.command())
	fmt.Fprintf(&b, "- Kind: %s; scenarios %s\n", kind, strings.Join(ids, ", "))
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
	fmt.Fprintf(&b, "- Each figure is the median of %d measurements of %v (Go's testing.Benchmark with b.Loop) unless its scenario says otherwise; "+
		"a lookup table's contenders are built together and measured in rounds, each round timing every contender once in turn, so that a change in the machine's speed reaches them alike "+
		"(build costs, heap and writes are measured with each contender's table alone); the run took %s.\n",
		r.c.runs, r.c.benchtime, time.Since(r.start).Round(time.Second))
	b.WriteString("- Contenders: udpdemux's `demux.Table` under `OnePhase`, `TwoPhase` and `Hybrid` with a fixed slot count, " +
		"and with the default `demux.Config{}`; gVisor's netstack " +
		"(`stack.Stack.FindTransportEndpoint` after `RegisterTransportEndpoint`, `ports.PortManager.ReservePort`), " +
		"gvisor.dev/gvisor " + gvisorVersion() + "; the *map floor*, a Go map probed once with the receiving socket's exact key, " +
		"which knows the answer's key in advance and so bounds what any demultiplexer can do; " +
		"for bind(0), the Linux kernel through syscalls in a network namespace.\n")
	b.WriteString("- Lookups go to the bound sockets in a random order (a precomputed list of up to 65 536 datagrams, cycled), " +
		"and every contender is checked to find the right socket before it is timed. Times are per operation: lower is better.\n")
	if len(r.errs) > 0 {
		b.WriteString("\n**Failures in this run:**\n\n")
		for _, e := range r.errs {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	for _, s := range r.sections {
		fmt.Fprintf(&b, "\n## %s\n\n%s", s.title, s.body.String())
	}
	if err := r.savePlots(dir); err != nil {
		return err
	}
	path := filepath.Join(dir, "RESULTS.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	r.progress("wrote %s", path)
	return nil
}
