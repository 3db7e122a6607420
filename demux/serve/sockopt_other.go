//go:build !linux

package serve

import "net/netip"

// setSockopts does nothing outside Linux: package net already makes a
// "udp6" wildcard socket IPv6-only, and SO_RXQ_OVFL is Linux's, so
// KernelDrops stays 0 elsewhere (as does ReadBuffer's effect).
func setSockopts(fd int, v6 bool, rcvbuf int) error { return nil }

func rxqOverflow([]byte) (uint32, bool) { return 0, false }

// specDst has no source outside Linux: IP_RECVDSTADDR carries the
// destination only.
func specDst([]byte) (netip.Addr, bool) { return netip.Addr{}, false }

var oobSpace = 0

const msgTrunc = 0x20 // MSG_TRUNC on Linux and the BSDs
