//go:build linux

package conformance

import (
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/udpdemux/udpdemux/internal/model"
)

// Knobs. Each flag (go test ./conformance -args -conformance.seed=N) has an
// environment variable of the same meaning; the flag wins.
//
//	UDPDEMUX_CONFORMANCE_SEED       seed of the random run (default: fresh, printed)
//	UDPDEMUX_CONFORMANCE_SCENARIOS  scenarios per seed (default 2500, 300 with -short)
//	UDPDEMUX_CONFORMANCE_REPLAY     seed:index — run that one scenario, print its trace
//	UDPDEMUX_CONFORMANCE_EXCUSE     kernel features whose differences count as
//	                                deliberate besides the diffN (hash4,
//	                                placeholder-fallback; see model.Features),
//	                                and connect46 to skip the connects that
//	                                the table refuses; for hunting further
//	                                differences only
//	UDPDEMUX_CONFORMANCE_LOOPBACK=1 use the host loopback even as root
var (
	flagSeed      = flag.String("conformance.seed", "", "seed of the random run of the kernel conformance test (default: fresh)")
	flagScenarios = flag.Int("conformance.scenarios", 0, "scenarios per seed of the kernel conformance test")
	flagReplay    = flag.String("conformance.replay", "", "seed:index of one kernel conformance scenario to replay verbosely")
	flagExcuse    = flag.String("conformance.excuse", "", "kernel features to treat as deliberate differences besides the diffN ones (hash4,placeholder-fallback), and connect46; for hunting only")
)

// fixedSeed always runs, so that CI covers a known set of scenarios.
const fixedSeed = 20091105

const (
	defaultScenarios = 2500
	shortScenarios   = 300
	maxReports       = 3 // failures printed in full per kind
	// coverageScenarios is the number of scenarios per seed from which the
	// run must have compared connects through a device without an address
	// of the family (per scenario, some 0.4 connects keep the wildcard, 0.1
	// find no IPv6 source, 0.3 datagrams reach a socket that kept the
	// wildcard): with fewer, as in a hook's quick run of 20, none may come
	// up by chance.
	coverageScenarios = 100
)

func knob(flagVal, env string) string {
	if flagVal != "" {
		return flagVal
	}
	return os.Getenv(env)
}

// deliberate are the kernel behaviours that udpdemux does not follow on
// purpose: the deliberate differences of DESIGN.md and README that a
// scenario can show (1 to 4, 6 and 7; 5 needs bind(0), whose port the
// table and the kernel choose each on its own).
const deliberate = model.Linux &^ model.Udpdemux

func parseExcuse(s string) (feature, error) {
	f := deliberate
	for _, n := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		found := false
		if n == "connect46" {
			f |= skipConnect46
			continue
		}
		for _, fn := range each {
			if fn.String() == n {
				f |= fn
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown feature %q (want diff1, diff1-peer, diff2-diff4, diff6, diff7, hash4, placeholder-fallback or connect46)", n)
		}
	}
	return f, nil
}

// TestKernelConformance runs random scenarios — binds of IPv4 and IPv6
// sockets with SO_REUSEADDR, SO_REUSEPORT (two owners), IPV6_V6ONLY and
// SO_BINDTODEVICE, connects (again, too; some through a device without an
// address of the peer's family, where routing finds no source),
// disconnects (of SO_REUSEPORT group members too, each followed by
// datagrams from addresses other than the old peer's), SO_BINDTODEVICE
// after connect and after disconnect, closes, and datagrams from fixed peer
// sockets — on real kernel sockets and on a demux table of each
// configuration of demuxtest.Configs. After each op the bind result (ok or the errno) must match;
// a disconnect and a SO_BINDTODEVICE the tables must accept, and then
// report the kernel's local address and peer; a connect the kernel accepts, the table must accept, given the
// local address getsockname reports (unspecified where the wildcard stays),
// and then report the kernel's local and remote addresses; a connect the
// kernel refuses for the addresses' families or for want of a source, the
// table must refuse with the same errno; and a datagram must reach the same
// socket or none, or, when the table chose from a SO_REUSEPORT group, a
// member of that group.
//
// When it starts, the test probes the running kernel for each behaviour
// that varies between kernels (probe_linux_test.go) and prints what it
// found. The model (package internal/model, with that kernel's
// features: classify_linux_test.go) recognises the steps where the deliberate differences (DESIGN.md) change the
// kernel's answer. Those steps are counted; the table is checked against
// udpdemux's rule (the model without the differences) and the kernel
// against the model, which keeps the recognition exact. A difference that
// the running kernel does not show makes no step deliberate. A failing scenario is shrunk to a minimal
// list of ops and printed with the command that replays it.
func TestKernelConformance(t *testing.T) {
	excuse, err := parseExcuse(knob(*flagExcuse, "UDPDEMUX_CONFORMANCE_EXCUSE"))
	if err != nil {
		t.Fatal(err)
	}
	n := defaultScenarios
	if testing.Short() {
		n = shortScenarios
	}
	if s := os.Getenv("UDPDEMUX_CONFORMANCE_SCENARIOS"); s != "" {
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("UDPDEMUX_CONFORMANCE_SCENARIOS: %v", err)
		}
	}
	if *flagScenarios > 0 {
		n = *flagScenarios
	}

	e := mustSetup(t)
	defer e.close()
	mode := "root: own network namespace"
	if !e.root {
		mode = "host loopback"
	}
	t.Logf("%s; %s", mode, strings.Join(e.notes, "; "))
	if excuse != deliberate {
		t.Logf("differences from %v are counted as deliberate in this run (UDPDEMUX_CONFORMANCE_EXCUSE)", excuse&^(deliberate|skipConnect46))
		if excuse&skipConnect46 != 0 {
			t.Logf("connects of IPv6 sockets with an IPv6 local address to v4-mapped peers are skipped in this run")
		}
	}

	if rp := knob(*flagReplay, "UDPDEMUX_CONFORMANCE_REPLAY"); rp != "" {
		seed, index, err := parseReplay(rp)
		if err != nil {
			t.Fatal(err)
		}
		var res result
		e.th.Do(func() { res, err = runScenario(e, seed, index, excuse) })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("scenario %d:%d:\n  %s", seed, index, strings.Join(res.trace, "\n  "))
		if res.fail != nil {
			var small result
			e.th.Do(func() { small = shrink(e, res, excuse) })
			t.Errorf("%s\nminimal reproducer (%d ops):\n  %s", res.fail.msg, len(small.ops), strings.Join(small.trace, "\n  "))
		}
		return
	}

	random := freshSeed()
	if s := knob(*flagSeed, "UDPDEMUX_CONFORMANCE_SEED"); s != "" {
		if random, err = strconv.ParseUint(s, 0, 64); err != nil {
			t.Fatalf("seed %q: %v", s, err)
		}
	}
	total := newStats()
	for _, seed := range []uint64{fixedSeed, random} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d, %d scenarios (replay one with UDPDEMUX_CONFORMANCE_REPLAY=%d:INDEX)", seed, n, seed)
			st := runSeed(t, e, seed, n, excuse)
			t.Logf("%v", st)
			total.add(st)
		})
	}
	t.Logf("total: %v", total)
	summary(t, fmt.Sprintf("kernel conformance: %d of %d scenarios run (seeds %d and %d, %s), %d binds, %d connects (%d keep-wildcard connects), %d refused connects (%d without an IPv6 source), %d disconnects (%d of connected SO_REUSEPORT sockets), %d SO_BINDTODEVICE after bind (%d after connect, %d after disconnect) and %d datagrams (%d to a socket that kept the wildcard; to disconnected sockets, not from their old peers %v) compared; deliberate-difference steps %v; %s",
		total.scenarios, 2*n, fixedSeed, random, mode, total.bindsCompared(), total.connects, total.keepWild,
		total.connectErrs, total.noSource, total.disconnects, total.rpDisconnects, total.setdevs, total.setdevConnected, total.setdevDisconnected,
		total.sends, total.toKeptWild, sortedMap(total.afterDisconnect), sortedMap(total.deliberate), e.probeNote()+"; "+e.kernelNote()))
	if e.root && n >= coverageScenarios {
		for _, c := range []struct {
			what string
			n    int
		}{
			{"disconnects of connected SO_REUSEPORT sockets", total.rpDisconnects},
			{"SO_BINDTODEVICE after connect", total.setdevConnected},
			{"SO_BINDTODEVICE after disconnect", total.setdevDisconnected},
			{"IPv4 datagrams to disconnected IPv4 sockets, not from their old peers", total.afterDisconnect["ipv4/v4"]},
			{"IPv6 datagrams to disconnected IPv6-only sockets, not from their old peers", total.afterDisconnect["ipv6/v6"]},
			{"IPv4 datagrams to disconnected dual-stack sockets, not from their old peers", total.afterDisconnect["dual/v4"]},
			{"IPv6 datagrams to disconnected dual-stack sockets, not from their old peers", total.afterDisconnect["dual/v6"]},
		} {
			if c.n == 0 {
				t.Errorf("%d scenarios per seed compared no %s: the generator must make them", n, c.what)
			}
		}
	}
	if e.root && n >= coverageScenarios && (total.keepWild == 0 || total.noSource == 0 || total.toKeptWild == 0) {
		t.Errorf("%d scenarios per seed compared %d keep-wildcard connects, %d connects without an IPv6 source and %d datagrams to a socket that kept the wildcard: "+
			"each must have come up (connects through a device without an address of the family, nov4 and nov6; setup: %s)",
			n, total.keepWild, total.noSource, total.toKeptWild, strings.Join(e.notes, "; "))
	}
}

// summary logs line and, when UDPDEMUX_CONFORMANCE_SUMMARY names a file,
// appends it there: CI prints that file, so that its log shows that the
// test ran and what it compared even without -v.
func summary(t *testing.T, line string) {
	t.Log(line)
	path := os.Getenv("UDPDEMUX_CONFORMANCE_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Errorf("UDPDEMUX_CONFORMANCE_SUMMARY: %v", err)
	}
}

// bindsCompared counts the binds whose result was compared with the
// kernel's.
func (s *stats) bindsCompared() int {
	n := 0
	for _, v := range s.binds {
		n += v
	}
	return n
}

func parseReplay(s string) (seed, index uint64, err error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("replay %q: want seed:index", s)
	}
	if seed, err = strconv.ParseUint(a, 0, 64); err == nil {
		index, err = strconv.ParseUint(b, 0, 64)
	}
	return seed, index, err
}

func freshSeed() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:]) >> 1 // fits an int64 flag value too
}

// runSeed runs n scenarios of one seed and reports every failure kind.
func runSeed(t *testing.T, e *env, seed uint64, n int, excuse feature) *stats {
	st := newStats()
	byKind := map[string]int{}
	var kinds []string
	start := time.Now()
	e.th.Do(func() {
		for i := uint64(0); i < uint64(n); i++ {
			res, err := runScenario(e, seed, i, excuse)
			if err != nil {
				t.Errorf("scenario %d:%d: %v", seed, i, err)
				return
			}
			st.add(res.st)
			if res.fail == nil {
				continue
			}
			if res.fail.kind == "env" {
				t.Errorf("scenario %d:%d: test environment: %s", seed, i, res.fail.msg)
				return
			}
			if byKind[res.fail.kind] == 0 {
				kinds = append(kinds, res.fail.kind)
			}
			byKind[res.fail.kind]++
			if byKind[res.fail.kind] > maxReports {
				continue
			}
			small := shrink(e, res, excuse)
			t.Errorf("scenario %d:%d: %s\nminimal reproducer (%d of %d ops):\n  %s\nreplay: UDPDEMUX_CONFORMANCE_REPLAY=%d:%d go test ./conformance -run TestKernelConformance -v",
				seed, i, res.fail.msg, len(small.ops), len(res.ops), strings.Join(small.trace, "\n  "), seed, i)
		}
	})
	for _, k := range kinds {
		t.Errorf("%d scenarios failed with: %s", byKind[k], k)
	}
	t.Logf("%d scenarios in %v", n, time.Since(start).Round(time.Millisecond))
	return st
}
