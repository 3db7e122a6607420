package ipv6

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/udpdemux/udpdemux/lookup"
)

// Local is the local side of a socket as the cross-family rules see it.
type Local struct {
	Flags  uint8 // Is6, V6Only, HasV4, HasV6 bits of sock
	V4     uint32
	V6     lookup.Addr16
	Device int // the interface a link-local address is scoped to (0: none)
}

// ZoneIndex turns an address zone into an interface index. The default,
// numericZone, accepts decimal indexes only.
type ZoneIndex func(zone string) (int, error)

// numericZone parses a zone such as "3" as the interface index 3.
func numericZone(zone string) (int, error) {
	n, err := strconv.ParseUint(zone, 10, 31)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("zone %q is not an interface index: %w", zone, syscall.EINVAL)
	}
	return int(n), nil
}

// resolveZone returns the interface index zone names through zi (nil:
// numericZone). An index that is not a positive int32 is EINVAL: a larger
// one would alias another interface once stored.
func resolveZone(zi ZoneIndex, zone string) (int, error) {
	if zi == nil {
		zi = numericZone
	}
	idx, err := zi(zone)
	if err != nil {
		if !errors.Is(err, syscall.EINVAL) {
			err = fmt.Errorf("%w: %w", err, syscall.EINVAL)
		}
		return 0, err
	}
	if idx <= 0 || idx > math.MaxInt32 {
		return 0, fmt.Errorf("zone %q names interface %d: %w", zone, idx, syscall.EINVAL)
	}
	return idx, nil
}

// scopeOf returns the interface that address a names: its zone's index,
// or dev for an address that needs an interface and has no zone; 0 for an
// address that needs none. It fails with EINVAL for a zone on an address
// that takes none, a zone that names an interface other than dev (when dev
// is not 0), and an address that needs an interface and has none.
func scopeOf(a netip.Addr, dev int, zi ZoneIndex) (int, error) {
	zone := a.Zone()
	if !needsScope(a) {
		if zone != "" {
			return 0, fmt.Errorf("zone on %v, which is not link-local: %w", a, syscall.EINVAL)
		}
		return 0, nil
	}
	if zone == "" {
		if dev == 0 {
			return 0, fmt.Errorf("link-local %v needs an interface (a zone or a device): %w", a, syscall.EINVAL)
		}
		return dev, nil
	}
	idx, err := resolveZone(zi, zone)
	if err != nil {
		return 0, err
	}
	if dev != 0 && dev != idx {
		return 0, fmt.Errorf("zone %q (interface %d) but device %d: %w", zone, idx, dev, syscall.EINVAL)
	}
	return idx, nil
}

// needsScope reports whether a needs an interface to be meaningful:
// link-local unicast (fe80::/10) and link-local multicast (ff02::/16) IPv6.
func needsScope(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast())
}

// Bind returns the local side of a socket bound to a with the given V6Only
// and device. It fails with EINVAL for an invalid address, V6Only with an
// IPv4 or v4-mapped address, a zone on an address that takes none, or a
// link-local address with no interface or two different ones.
func Bind(a netip.Addr, v6only bool, device int, zi ZoneIndex) (Local, error) {
	if !a.IsValid() {
		return Local{}, fmt.Errorf("invalid local address: %w", syscall.EINVAL)
	}
	idx, err := scopeOf(a, device, zi)
	if err != nil {
		return Local{}, err
	}
	l := Local{Device: idx}
	a = a.WithZone("")
	switch {
	case a.Is4():
		if v6only {
			return Local{}, fmt.Errorf("V6Only on IPv4 address %v: %w", a, syscall.EINVAL)
		}
		l.Flags = lookup.HasV4
		l.V4 = lookup.V4(a)
		l.V6 = lookup.Map4(l.V4)
	case a.Is4In6():
		// A v4-mapped address is IPv4 traffic, which V6Only refuses
		// (DESIGN.md row 22).
		if v6only {
			return Local{}, fmt.Errorf("V6Only with v4-mapped address %v: %w", a, syscall.EINVAL)
		}
		l.Flags = lookup.Is6 | lookup.HasV4
		l.V6 = lookup.Addr16Of(a)
		l.V4 = l.V6.V4()
	case a.IsUnspecified():
		l.Flags = lookup.Is6 | lookup.HasV6
		if v6only {
			l.Flags |= lookup.V6Only
		} else {
			l.Flags |= lookup.HasV4
		}
	default:
		// A specific IPv6 address makes the socket IPv6-only (Linux
		// __inet6_bind; DESIGN.md row 23); its IPv4 side is the
		// placeholder.
		l.Flags = lookup.Is6 | lookup.HasV6 | lookup.V6Only
		l.V6 = lookup.Addr16Of(a)
		l.V4 = lookup.Placeholder4
	}
	return l, nil
}

// isWild reports whether the local side is a wildcard address ("0.0.0.0",
// "::" or "::ffff:0.0.0.0").
func (l Local) isWild() bool { return l.key() == lookup.Wild4 }

// key returns the secondary-table key of the local side (lookup.KeyOf).
func (l Local) key() lookup.Addr16 { return lookup.KeyOf(l.Flags, l.V4, l.V6) }

// addrFlags are the flags of an entry that state its local side.
const addrFlags = lookup.Is6 | lookup.V6Only | lookup.HasV4 | lookup.HasV6

// LocalOf returns e's local side.
func LocalOf(e *lookup.Entry) Local {
	return Local{Flags: e.Flags & addrFlags, V4: e.V4, V6: e.V6}
}

// SetOn copies the local side l into e (its device aside).
func (l Local) SetOn(e *lookup.Entry) {
	e.Flags = e.Flags&^addrFlags | l.Flags
	e.V4, e.V6 = l.V4, l.V6
}
