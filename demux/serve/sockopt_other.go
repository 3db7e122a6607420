//go:build !linux

package serve

import "errors"

// setSockopts does nothing outside Linux: package net already makes a
// "udp6" wildcard socket IPv6-only, and SO_RXQ_OVFL is Linux's, so
// KernelDrops stays 0 elsewhere (as does ReadBuffer's effect).
func setSockopts(fd int, v6 bool, rcvbuf int) error { return nil }

// claimPort does nothing outside Linux, where setSockopts set no
// SO_REUSEADDR to clear.
func claimPort(fd int) error { return nil }

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

var oobSpace = 0

const msgTrunc = 0x20 // MSG_TRUNC on Linux and the BSDs

// msgCtrunc is never reported outside Linux: a Conn returns no control
// messages there.
const msgCtrunc = 0
