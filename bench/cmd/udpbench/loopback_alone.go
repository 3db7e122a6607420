package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/udpdemux/udpdemux/demux"
)

// Each receiver alone: the receiver runs in a child process of the runner
// (told by this environment variable), which the runner stops (SIGSTOP)
// while the sender fills the receive queues, and resumes (SIGCONT) once
// the sender is done, so that the receiver reads them with the machine to
// itself, and its process's CPU time is the receiver's alone.
const receiverEnv = "UDPBENCH_LOOPBACK_RECEIVER"

// drainTruesize is the receive-buffer memory that the kernel charges for
// one of the scenario's datagrams on loopback, rounded up: the receiver
// alone gives each socket this much per datagram it will queue, so that
// none is dropped while it is stopped.
const drainTruesize = 4096

// loopbackAlone runs one row with one receiver alone: the rate runs from
// the SIGCONT (CLOCK_MONOTONIC, which both processes read) to the last
// datagram received.
func loopbackAlone(recv string, nsocks, ndgrams, payload int, strategy demux.Strategy) (lbResult, error) {
	var res lbResult
	port, err := freePort()
	if err != nil {
		return res, err
	}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	rc := exec.Command(exe)
	rc.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d|%d|%d|%s", receiverEnv, recv, nsocks, port, ndgrams, strategy))
	rc.Stderr = os.Stderr
	in, err := rc.StdinPipe()
	if err != nil {
		return res, err
	}
	outPipe, err := rc.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := rc.Start(); err != nil {
		return res, err
	}
	defer func() { // whatever happened, no child is left, stopped or not
		_ = rc.Process.Kill()
		_ = rc.Wait()
	}()
	out := bufio.NewReader(outPipe)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		return res, fmt.Errorf("receiver: %q, %v", line, err)
	}
	if err := syscall.Kill(rc.Process.Pid, syscall.SIGSTOP); err != nil {
		return res, err
	}
	if err := waitStopped(rc.Process.Pid, 10*time.Second); err != nil {
		return res, err
	}
	if res.sent, res.sendTime, err = send(nsocks, ndgrams, payload, port); err != nil {
		return res, err
	}
	resumed := monotonic()
	if err := syscall.Kill(rc.Process.Pid, syscall.SIGCONT); err != nil {
		return res, err
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		return res, err
	}
	line, err := out.ReadString('\n')
	if err != nil {
		return res, fmt.Errorf("receiver: %v", err)
	}
	var last, cpu int64
	if _, err := fmt.Sscanf(line, "%d %d %d %d", &res.got, &res.wrong, &last, &cpu); err != nil {
		return res, fmt.Errorf("receiver said %q: %v", line, err)
	}
	res.elapsed = time.Duration(last - resumed)
	res.cpu = time.Duration(cpu)
	res.lookupNs = math.NaN()
	return res, nil
}

// runReceiver is the receiver process of loopbackAlone. Once its sockets
// are bound it says "ready" and waits for "go" on its standard input,
// which comes after the runner stopped it, let the sender send, and
// resumed it; then it receives until it has every datagram or none came
// for 200 ms, and prints the datagrams received, the wrong ones, the
// CLOCK_MONOTONIC time of the last and its CPU time since "ready".
func runReceiver(spec string) error {
	f := strings.Split(spec, "|")
	if len(f) != 5 {
		return fmt.Errorf("bad spec %q", spec)
	}
	recv := f[0]
	nsocks, err1 := strconv.Atoi(f[1])
	port, err2 := strconv.Atoi(f[2])
	ndgrams, err3 := strconv.Atoi(f[3])
	strategy, err4 := parseStrategy(f[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return fmt.Errorf("bad spec %q: %w", spec, err)
	}
	// The kernel caps a receive buffer at half the largest int (and
	// charges twice what is asked for).
	rcvbuf := min(max(rmemDefault(), ndgrams*drainTruesize), math.MaxInt32/2)
	var rc receiver
	var err error
	switch recv {
	case lbDemux:
		rc, err = newDemuxReceiver(nsocks, port, strategy, 1, rcvbuf)
	case lbDemux2R:
		rc, err = newDemuxReceiver(nsocks, port, strategy, 2, rcvbuf)
	default:
		rc, err = newKernelReceiver(nsocks, port, rcvbuf)
	}
	if err != nil {
		return err
	}
	defer rc.stop()
	runtime.GC() // the setup's garbage is not the receiver's to collect
	cpu0 := ownCPU()
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("runner said %q, %v", line, err)
	}
	want := uint64(nsocks * ndgrams)
	got, lastAt, lastMono := uint64(0), time.Now(), monotonic()
	for {
		n, _ := rc.received()
		if n != got {
			got, lastAt, lastMono = n, time.Now(), monotonic()
		}
		if got >= want || time.Since(lastAt) > 200*time.Millisecond {
			break
		}
		time.Sleep(500 * time.Microsecond)
	}
	cpu := ownCPU() - cpu0
	got, wrong := rc.received()
	fmt.Println(got, wrong, lastMono, cpu.Nanoseconds())
	return nil
}
