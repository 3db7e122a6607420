package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSnap is a snapshot of the machine's busy CPU time and of this
// process's, to tell how much of the CPUs other processes took while the
// suite ran: a benchmark on a busy machine measures the other load too.
type cpuSnap struct {
	at   time.Time
	busy time.Duration // all CPUs, all processes (from /proc/stat)
	// own is this process's, with its children that ended (getrusage):
	// the loopback scenario's sender is a child, and not other load.
	own time.Duration
	ok  bool
}

// clockTick is USER_HZ, the unit of /proc/stat; 100 on Linux.
const clockTick = 100

func takeSnap() cpuSnap {
	s := cpuSnap{at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	var jiffies uint64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return s
		}
		jiffies += n
	}
	s.busy = time.Duration(jiffies) * time.Second / clockTick
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return s
		}
		s.own += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.ok = true
	return s
}

// othersSince returns how many CPUs other processes kept busy on average
// since s, or -1 if unknown.
func othersSince(s cpuSnap) float64 {
	e := takeSnap()
	if !s.ok || !e.ok {
		return -1
	}
	wall := e.at.Sub(s.at)
	if wall <= 0 {
		return -1
	}
	other := (e.busy - s.busy) - (e.own - s.own)
	return max(0, other.Seconds()/wall.Seconds())
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
