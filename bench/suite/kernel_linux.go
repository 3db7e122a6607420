//go:build linux

package suite

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
)

// The kernel contender runs in a network namespace of its own, made with
// unshare(CLONE_NEWNET) on a locked OS thread, where the ephemeral range
// (net.ipv4.ip_local_port_range) is narrowed to the bind(0) range without
// touching the host's. It needs CAP_SYS_ADMIN (root). The thread is never
// unlocked, so the Go runtime discards it, and the namespace, when the
// benchmark's goroutine ends.

// ErrNoNamespace is the error of the kernel contender when it cannot make
// a network namespace (not root, or no user namespaces).
var ErrNoNamespace = errors.New("cannot make a network namespace")

type bind0Kernel struct {
	free map[uint16]bool
}

func prepareBind0Kernel(free map[uint16]bool) (*bind0Kernel, error) {
	return &bind0Kernel{free: free}, nil
}

// kernelRange is the bind(0) range in the form of ip_local_port_range.
var kernelRange = fmt.Sprintf("%d %d\n", Bind0Low, Bind0High)

// enterNamespace locks the goroutine to its thread, moves the thread to a
// new network namespace and narrows its ephemeral range. It must run on a
// goroutine that ends after its work: the thread is never unlocked.
func enterNamespace() error {
	runtime.LockOSThread()
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		return fmt.Errorf("%w: unshare: %v", ErrNoNamespace, err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte(kernelRange), 0); err != nil {
		return fmt.Errorf("%w: ip_local_port_range: %v", ErrNoNamespace, err)
	}
	return nil
}

// fillKernel binds a UDP socket on 0.0.0.0 to every port of the range but
// the free ones, and returns the descriptors.
func fillKernel(free map[uint16]bool) ([]int, error) {
	fds := make([]int, 0, Bind0Range)
	for p := Bind0Low; p <= Bind0High; p++ {
		if free[uint16(p)] {
			continue
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
		if err == nil {
			err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: p})
			if err != nil {
				syscall.Close(fd)
			}
		}
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("fill port %d: %w", p, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// kernelBind0 makes a UDP socket and binds it to 0.0.0.0 port 0; it
// returns the descriptor and the port.
func kernelBind0() (int, uint16, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, 0, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{}); err != nil {
		syscall.Close(fd)
		return -1, 0, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return -1, 0, err
	}
	return fd, uint16(sa.(*syscall.SockaddrInet4).Port), nil
}

// inNamespace runs f on a new goroutine inside a fresh namespace whose
// range is filled but for the free ports.
func (f *bind0Kernel) inNamespace(run func() error) error {
	errc := make(chan error, 1)
	go func() {
		if err := enterNamespace(); err != nil {
			errc <- err
			return
		}
		fds, err := fillKernel(f.free)
		if err != nil {
			errc <- err
			return
		}
		defer closeAll(fds)
		errc <- run()
	}()
	return <-errc
}

// Bench returns the benchmark of socket(), bind() to 0.0.0.0 port 0 and
// close() (the socket call is included: a bound socket cannot be bound
// again). The benchmark runs in its own namespace.
func (f *bind0Kernel) Bench() func(*testing.B) {
	return func(b *testing.B) {
		err := f.inNamespace(func() error {
			b.ReportAllocs()
			var fails int
			for b.Loop() {
				fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				if err := syscall.Bind(fd, &syscall.SockaddrInet4{}); err != nil {
					fails++
				}
				syscall.Close(fd)
			}
			if fails > 0 && len(f.free) > 0 {
				return fmt.Errorf("%d of %d bind(0) failed with free ports", fails, b.N)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// Check implements Bind0Fixture.
func (f *bind0Kernel) Check() error {
	return f.inNamespace(func() error {
		var fd int
		err := checkBind0(f.free, func() (uint16, error) {
			var (
				p   uint16
				err error
			)
			fd, p, err = kernelBind0()
			return p, err
		}, func(uint16) { syscall.Close(fd) })
		if err == nil && len(f.free) == 0 {
			if fd, _, err2 := kernelBind0(); !errors.Is(err2, syscall.EADDRINUSE) {
				if err2 == nil {
					syscall.Close(fd)
				}
				err = fmt.Errorf("bind(0) in a full range: %v, want EADDRINUSE", err2)
			}
		}
		return err
	})
}

// Close implements the fixture interface.
func (f *bind0Kernel) Close() {}

// KernelSocketClose returns the benchmark of socket() and close() alone,
// in a fresh namespace: the part of the kernel contender's figure that is
// not bind(0).
func KernelSocketClose() func(*testing.B) {
	return func(b *testing.B) {
		f := &bind0Kernel{free: FreePorts(Bind0Range, 1)} // nothing filled
		err := f.inNamespace(func() error {
			for b.Loop() {
				fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				syscall.Close(fd)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
