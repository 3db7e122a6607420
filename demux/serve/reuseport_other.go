//go:build !linux

package serve

import "errors"

// setReusePort fails outside Linux, whose SO_REUSEPORT is the one that
// spreads datagrams over a group's sockets by flow.
func setReusePort(fd int) error {
	return errors.New("serve: Options.Readers above 1 needs Linux")
}

// setFreeBind fails outside Linux, where IP_FREEBIND is not portable.
func setFreeBind(fd int) error {
	return errors.New("serve: FreeBind with PerAddress needs Linux")
}

// steerFlows does nothing outside Linux, where Readers stays 1.
func steerFlows(fd int, v6 bool, n int) error { return nil }
