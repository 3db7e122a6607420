package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The loopback scenario's sender runs as a child process of the runner
// (the same executable, told by this environment variable), so that the
// runner's getrusage counts the receivers' CPU time only.
const senderEnv = "UDPBENCH_LOOPBACK_SENDER"

func init() {
	if spec := os.Getenv(receiverEnv); spec != "" {
		if err := runReceiver(spec); err != nil {
			fmt.Fprintf(os.Stderr, "udpbench loopback receiver: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(senderEnv); spec != "" {
		if err := runSender(spec); err != nil {
			fmt.Fprintf(os.Stderr, "udpbench loopback sender: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// send runs the sender process (this executable, told by senderEnv) and
// returns the datagrams it sent and the time it took.
func send(nsocks, ndgrams, payload, port int) (int, time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d %d", senderEnv, nsocks, ndgrams, payload, port))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("sender: %w", err)
	}
	var sent int
	var ns int64
	if _, err := fmt.Sscanf(string(out), "%d %d", &sent, &ns); err != nil {
		return 0, 0, fmt.Errorf("sender said %q: %v", out, err)
	}
	return sent, time.Duration(ns), nil
}

// loopbackAddr is the i-th destination address: 127.1.x.y, all local on
// Linux's loopback (127.0.0.0/8).
func loopbackAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(i%250 + 1)})
}

// senderSockets is how many sockets the sender sends from, in turn.
const senderSockets = 4

// runSender sends ndgrams rounds of one datagram to each of nsocks
// addresses on port, in sendmmsg batches, from senderSockets sockets on
// 127.0.0.1. Each payload starts with its destination's index. It prints
// the datagrams sent and the time it took.
func runSender(spec string) error {
	var nsocks, ndgrams, payload, port int
	if _, err := fmt.Sscanf(spec, "%d %d %d %d", &nsocks, &ndgrams, &payload, &port); err != nil {
		return fmt.Errorf("bad spec %q: %w", spec, err)
	}
	payload = max(payload, 4)
	var conns []*ipv4.PacketConn
	for range senderSockets {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		defer c.Close()
		conns = append(conns, ipv4.NewPacketConn(c))
	}
	const batch = 64
	bufs := make([][]byte, nsocks)
	addrs := make([]net.Addr, nsocks)
	for i := range nsocks {
		bufs[i] = make([]byte, payload)
		binary.BigEndian.PutUint32(bufs[i], uint32(i))
		addrs[i] = net.UDPAddrFromAddrPort(netip.AddrPortFrom(loopbackAddr(i), uint16(port)))
	}
	ms := make([]ipv4.Message, batch)
	sent, k := 0, 0
	start := time.Now()
	for range ndgrams {
		for i := 0; i < nsocks; {
			n := min(batch, nsocks-i)
			for j := range n {
				ms[j] = ipv4.Message{Buffers: [][]byte{bufs[i+j]}, Addr: addrs[i+j]}
			}
			c := conns[k%len(conns)]
			k++
			for off := 0; off < n; {
				w, err := c.WriteBatch(ms[off:n], 0)
				if err != nil {
					return err
				}
				off += w
			}
			sent += n
			i += n
		}
	}
	fmt.Println(strconv.Itoa(sent), time.Since(start).Nanoseconds())
	return nil
}

// waitStopped waits until process pid is stopped (state T in
// /proc/pid/stat).
func waitStopped(pid int, limit time.Duration) error {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return nil
		}
	}
	return fmt.Errorf("the runner (pid %d) did not stop within %v", pid, limit)
}

// monotonic returns CLOCK_MONOTONIC in nanoseconds, a clock that the
// runner and its receiver process read alike.
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
