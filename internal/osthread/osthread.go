//go:build linux

// Package osthread runs functions on one locked OS thread, which can have
// a network namespace of its own: the kernel conformance test and the
// benchmark runner's loopback scenario build their hosts in one. A socket
// stays in the namespace it was created in, whichever thread uses it
// later, and a process started on the thread inherits the namespace.
package osthread

import (
	"fmt"
	"runtime"
	"syscall"
)

// Thread runs functions on its locked OS thread. The goroutine never
// unlocks the thread, so the thread, and with it its namespace once the
// last socket is closed, ends when Stop ends the goroutine.
type Thread struct {
	reqs chan func()
	done chan struct{}
}

// Start locks a new thread, unshares its network namespace if unshare is
// set, and runs setup on it (if not nil); it returns the first error.
func Start(unshare bool, setup func() error) (*Thread, error) {
	th := &Thread{reqs: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		defer close(th.done)
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if unshare {
			if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
				errc <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
				return
			}
		}
		if setup != nil {
			if err := setup(); err != nil {
				errc <- err
				return
			}
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

// Do runs f on the thread and waits for it.
func (th *Thread) Do(f func()) {
	done := make(chan struct{})
	th.reqs <- func() { defer close(done); f() }
	<-done
}

// Stop ends the thread.
func (th *Thread) Stop() {
	close(th.reqs)
	<-th.done
}
