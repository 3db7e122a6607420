package main

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
)

// netnsThread runs functions on one OS thread that has a network
// namespace of its own with loopback up. Sockets made there stay in that
// namespace whichever thread uses them later, and processes started there
// (the sender) inherit it. The thread is never unlocked, so it ends, and
// the namespace with it, when stop ends its goroutine.
type netnsThread struct {
	reqs chan func()
	done chan struct{}
}

func newNetnsThread() (*netnsThread, error) {
	th := &netnsThread{reqs: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		defer close(th.done)
		runtime.LockOSThread()
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			errc <- fmt.Errorf("ip link set lo up: %v: %s", err, out)
			return
		}
		errc <- nil
		for f := range th.reqs {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return th, nil
}

// do runs f on the thread and waits for it.
func (th *netnsThread) do(f func()) {
	done := make(chan struct{})
	th.reqs <- func() { defer close(done); f() }
	<-done
}

func (th *netnsThread) stop() {
	close(th.reqs)
	<-th.done
}
