package serve

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// cmsg is one control message as the kernel lays it out: header, data,
// padding to the alignment of the next header.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, syscall.CmsgSpace(len(data)))
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(syscall.CmsgLen(len(data)))
	copy(b[syscall.CmsgLen(0):], data)
	return b
}

func pktinfo4(ifindex int32, spec, addr string) []byte {
	var pi syscall.Inet4Pktinfo
	pi.Ifindex, pi.Spec_dst, pi.Addr = ifindex, netip.MustParseAddr(spec).As4(), netip.MustParseAddr(addr).As4()
	return cmsg(syscall.IPPROTO_IP, syscall.IP_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), syscall.SizeofInet4Pktinfo))
}

func pktinfo6(ifindex uint32, addr string) []byte {
	var pi syscall.Inet6Pktinfo
	pi.Ifindex, pi.Addr = ifindex, netip.MustParseAddr(addr).As16()
	return cmsg(syscall.IPPROTO_IPV6, syscall.IPV6_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), syscall.SizeofInet6Pktinfo))
}

func rxqOvfl(n uint32) []byte {
	return cmsg(syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, binary.NativeEndian.AppendUint32(nil, n))
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// TestParseControl checks the reader's own walk over the control
// messages on the layouts the kernel sends and on broken ones, which must
// yield nothing rather than a panic or a loop.
func TestParseControl(t *testing.T) {
	a := netip.MustParseAddr
	v4 := cat(rxqOvfl(7), pktinfo4(3, "127.0.0.1", "127.0.0.2"))
	for _, c := range []struct {
		name string
		oob  []byte
		v6   bool
		want control
	}{
		{"v4 with drops", v4, false, control{dst: a("127.0.0.2"), ifindex: 3, specDst: a("127.0.0.1"), drops: 7, ok: true, hasDrop: true}},
		{"v4 pktinfo first", cat(pktinfo4(1, "10.0.0.1", "10.0.0.255"), rxqOvfl(0)), false,
			control{dst: a("10.0.0.255"), ifindex: 1, specDst: a("10.0.0.1"), ok: true, hasDrop: true}},
		{"v4 without drops", pktinfo4(2, "127.0.0.3", "127.0.0.3"), false, control{dst: a("127.0.0.3"), ifindex: 2, specDst: a("127.0.0.3"), ok: true}},
		{"v6", cat(rxqOvfl(1), pktinfo6(5, "fe80::1")), true, control{dst: a("fe80::1"), ifindex: 5, drops: 1, ok: true, hasDrop: true}},
		{"v6 socket ignores IP_PKTINFO", v4, true, control{drops: 7, hasDrop: true}},
		{"v4 socket ignores IPV6_PKTINFO", pktinfo6(5, "::1"), false, control{}},
		{"empty", nil, false, control{}},
		{"short header", v4[:8], false, control{}},
		{"truncated data", v4[:len(v4)-8], false, control{drops: 7, hasDrop: true}},
		{"zero length", make([]byte, 32), false, control{}},
		{"short pktinfo", cmsg(syscall.IPPROTO_IP, syscall.IP_PKTINFO, make([]byte, 8)), false, control{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, parseControl(c.oob, c.v6))
		})
	}
}

// FuzzParseControl compares the reader's walk with x/net's parsers, which
// it replaces on the receive path: wherever x/net reads a destination, the
// walk reads the same destination and interface.
func FuzzParseControl(f *testing.F) {
	f.Add(cat(rxqOvfl(7), pktinfo4(3, "127.0.0.1", "127.0.0.2")), false)
	f.Add(cat(pktinfo4(1, "10.0.0.1", "10.0.0.255"), pktinfo4(2, "10.0.0.2", "10.0.0.2")), false)
	f.Add(cat(rxqOvfl(1), pktinfo6(5, "fe80::1")), true)
	f.Add(pktinfo6(1, "ff02::1"), true)
	f.Fuzz(func(t *testing.T, oob []byte, v6 bool) {
		got := parseControl(oob, v6)
		var dst []byte
		var ifindex int
		if v6 && hasPathMTU(oob) {
			// x/net reads a destination from IPV6_PATHMTU, which the
			// adapter never asks the kernel for; the walk ignores it.
			return
		}
		if v6 {
			var cm ipv6.ControlMessage
			if cm.Parse(oob) != nil {
				return
			}
			dst, ifindex = cm.Dst, cm.IfIndex
		} else {
			var cm ipv4.ControlMessage
			if cm.Parse(oob) != nil {
				return
			}
			dst, ifindex = cm.Dst, cm.IfIndex
		}
		if dst == nil {
			assert.False(t, got.ok, "x/net found no destination")
			return
		}
		want, _ := netip.AddrFromSlice(dst)
		if !v6 {
			want = want.Unmap()
		}
		assert.True(t, got.ok)
		assert.Equal(t, want, got.dst)
		assert.Equal(t, ifindex, got.ifindex)
	})
}

// hasPathMTU reports whether oob holds an IPV6_PATHMTU message.
func hasPathMTU(oob []byte) bool {
	for h, _, rest, ok := nextCmsg(oob); ok; h, _, rest, ok = nextCmsg(rest) {
		if h.Level == syscall.IPPROTO_IPV6 && h.Type == ipv6PathMTU {
			return true
		}
	}
	return false
}

// ipv6PathMTU is Linux's IPV6_PATHMTU, which package syscall lacks.
const ipv6PathMTU = 61
