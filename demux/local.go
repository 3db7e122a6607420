package demux

import (
	"fmt"
	"net/netip"
	"syscall"
)

// checkLocal is Bind's local-address check: EADDRNOTAVAIL for an address
// that is not the host's, before any port is looked at (Linux's order).
// As Linux does for a socket without IP_FREEBIND, the wildcards (0.0.0.0,
// "::", ::ffff:0.0.0.0), multicast addresses and 255.255.255.255 bind
// whatever Config.IsLocal says; any other address must be one it accepts,
// a v4-mapped one as its IPv4 address, without its zone.
func (t *Table[V]) checkLocal(addr netip.Addr, device int) error {
	a := addr.WithZone("").Unmap()
	if t.isLocal == nil || a.IsUnspecified() || a.IsMulticast() ||
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || t.isLocal(a, device) {
		return nil
	}
	return fmt.Errorf("%v is not a local address: %w", addr, syscall.EADDRNOTAVAIL)
}
