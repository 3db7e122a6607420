package suite

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// The flood shapes: a victim socket, and many sockets that a local tenant
// (or a host with many VRFs, tunnels or per-tenant interfaces) binds
// beside it, in the shapes a hostile review of the table tried. Each
// names one way the attackers' sockets could share what the victim's
// lookups read: the victim's key, its port, or its hash.
const (
	// FloodDevices: wildcard sockets on the victim's port, each bound to
	// a device of its own; the victim is a wildcard socket bound to none.
	FloodDevices = "device-wildcards"
	// FloodAliasedWild: wildcard sockets on AliasPort; the victim is a
	// wildcard socket on VictimPort.
	FloodAliasedWild = "aliased-wildcards"
	// FloodIPv6Net: sockets on IPv6 addresses of the victim's /64, on its
	// port.
	FloodIPv6Net = "ipv6-one-64"
	// FloodHighHalf: sockets on IPv6 addresses that differ from the
	// victim's and each other's only in their high 64 bits, on its port.
	FloodHighHalf = "ipv6-high-half"
	// FloodAliasedDevices: sockets on the victim's address on AliasPort,
	// each bound to a device of its own.
	FloodAliasedDevices = "aliased-devices"
)

// FloodKinds are the flood shapes, in the order of the report.
var FloodKinds = []string{FloodDevices, FloodAliasedWild, FloodIPv6Net, FloodHighHalf, FloodAliasedDevices}

// firstDevice is the device of a flood's first attacker: the lookups
// arrive on interface 1, which no attacker is bound to.
const firstDevice = 2

// Flood returns the flood shape kind with the given number of attackers
// (0 for the baseline: the victim alone). The victim is socket 0; its set
// "victim" sends datagrams from random sources to it. Every socket sets
// SO_REUSEADDR, so that the attackers can share the victim's address and
// each other's. Its churn holds the next 1 024 attackers, for timing the
// next bind at the shape's size.
func Flood(kind string, attackers int, seed uint64) (*Shape, error) {
	r := rand.New(rand.NewPCG(seed, 11))
	victim, attacker, dst, ok := floodOf(kind)
	if !ok {
		return nil, fmt.Errorf("suite: no flood shape %q", kind)
	}
	sh := &Shape{Name: fmt.Sprintf("flood-%s/%d", kind, attackers), Socks: make([]Sock, attackers+1)}
	sh.Socks[0] = victim
	for i := 1; i <= attackers; i++ {
		sh.Socks[i] = attacker(i)
	}
	for i := attackers + 1; i <= attackers+1024; i++ {
		sh.Churn = append(sh.Churn, attacker(i))
	}
	ds := make([]Datagram, 4096)
	for j := range ds {
		src := randomSrc(r)
		if dst.Addr().Is6() {
			src = randomSrc6(r)
		}
		ds[j] = Datagram{Src: src, Dst: dst, Want: 0}
	}
	sh.Sets = []Set{{SetVictim, ds}}
	return sh, nil
}

// floodOf returns the victim of a flood shape, its i-th attacker (from 1)
// and the destination of the victim's datagrams.
func floodOf(kind string) (victim Sock, attacker func(i int) Sock, dst netip.AddrPort, ok bool) {
	v4 := netip.AddrPortFrom(addr4(10, 1), VictimPort)
	any4 := netip.AddrPortFrom(netip.IPv4Unspecified(), VictimPort)
	switch kind {
	case FloodDevices:
		return Sock{Local: any4, ReuseAddr: true}, func(i int) Sock {
			return Sock{Local: any4, ReuseAddr: true, Device: firstDevice + i - 1}
		}, v4, true
	case FloodAliasedWild:
		alias := netip.AddrPortFrom(netip.IPv4Unspecified(), AliasPort)
		return Sock{Local: any4, ReuseAddr: true}, func(int) Sock {
			return Sock{Local: alias, ReuseAddr: true}
		}, v4, true
	case FloodIPv6Net, FloodHighHalf:
		at := func(i int) netip.Addr {
			a := netip.MustParseAddr("2001:db8::1").As16()
			if kind == FloodIPv6Net {
				a[12], a[13], a[14], a[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
			} else {
				a[4], a[5], a[6], a[7] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
			}
			return netip.AddrFrom16(a)
		}
		return Sock{Local: netip.AddrPortFrom(at(1), VictimPort), ReuseAddr: true}, func(i int) Sock {
			return Sock{Local: netip.AddrPortFrom(at(i+1), VictimPort), ReuseAddr: true}
		}, netip.AddrPortFrom(at(1), VictimPort), true
	case FloodAliasedDevices:
		alias := netip.AddrPortFrom(addr4(10, 1), AliasPort)
		return Sock{Local: v4, ReuseAddr: true}, func(i int) Sock {
			return Sock{Local: alias, ReuseAddr: true, Device: firstDevice + i - 1}
		}, v4, true
	}
	return Sock{}, nil, netip.AddrPort{}, false
}

// randomSrc6 returns a random IPv6 source address and port, from
// 2001:db8:ffff::/48, which no shape binds.
func randomSrc6(r *rand.Rand) netip.AddrPort {
	var a [16]byte
	copy(a[:], netip.MustParseAddr("2001:db8:ffff::").AsSlice())
	for i := 6; i < 16; i++ {
		a[i] = byte(r.Uint32())
	}
	return netip.AddrPortFrom(netip.AddrFrom16(a), uint16(1024+r.IntN(64512)))
}

// Devices reports whether any socket of the shape is bound to a device.
func (sh *Shape) Devices() bool {
	for i := range sh.Socks {
		if sh.Socks[i].Device != 0 {
			return true
		}
	}
	return false
}
