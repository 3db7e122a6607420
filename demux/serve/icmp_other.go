//go:build !linux

package serve

import (
	"errors"
	"net/netip"
)

// icmpSender is Linux's only: elsewhere Options.PortUnreachable fails.
type icmpSender struct{}

func newICMPSender(bool) (*icmpSender, error) {
	return nil, errors.New("serve: PortUnreachable needs Linux's raw sockets")
}

func (*icmpSender) unreachable(netip.AddrPort, netip.AddrPort, int, []byte) (sent, limited bool, err error) {
	return false, false, nil
}

func (*icmpSender) close() {}
