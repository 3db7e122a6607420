package demux

import (
	"fmt"
	"net/netip"
	"syscall"
)

// localOK reports whether Linux would let a socket without IP_FREEBIND
// bind addr on device, given isLocal (Config.IsLocal): the wildcards
// (0.0.0.0, "::", ::ffff:0.0.0.0), multicast addresses and 255.255.255.255
// bind whatever isLocal says; any other address must be one isLocal
// accepts, a v4-mapped one as its IPv4 address, without its zone.
func localOK(addr netip.Addr, device int, isLocal func(netip.Addr, int) bool) bool {
	a := addr.WithZone("").Unmap()
	if isLocal == nil || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	return isLocal(a, device)
}

// checkLocal is Bind's local-address check: EADDRNOTAVAIL for an address
// that is not the host's, before any port is looked at (Linux's order).
func (t *Table[V]) checkLocal(addr netip.Addr, device int) error {
	if localOK(addr, device, t.isLocal) {
		return nil
	}
	return fmt.Errorf("%v is not a local address: %w", addr, syscall.EADDRNOTAVAIL)
}
