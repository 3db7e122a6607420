package serve

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ticker ticks every period while started. On Linux it is a timerfd read
// through the runtime's poller, which its expiry wakes at once: a runtime
// timer, when no goroutine is running, waits in epoll_wait with a timeout
// rounded up to a millisecond, so that a shorter tick comes late.
type ticker struct {
	f  *os.File
	fd int
}

func newTicker() (*ticker, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	return &ticker{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}, nil
}

func (t *ticker) start(period time.Duration) {
	ts := unix.NsecToTimespec(period.Nanoseconds())
	_ = unix.TimerfdSettime(t.fd, 0, &unix.ItimerSpec{Interval: ts, Value: ts}, nil)
}

func (t *ticker) stop() { _ = unix.TimerfdSettime(t.fd, 0, &unix.ItimerSpec{}, nil) }

// wait waits for the next tick; it fails once t is closed.
func (t *ticker) wait() error {
	var n [8]byte // the count of expiries since the last read
	_, err := t.f.Read(n[:])
	return err
}

// close ends t, and any wait in progress.
func (t *ticker) close() { _ = t.f.Close() }
