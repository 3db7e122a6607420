package demux_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/udpdemux/udpdemux/demux"
)

// bytesReader hands out fuzz input piece by piece, zeros once it runs out.
type bytesReader struct{ b []byte }

func (r *bytesReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *bytesReader) u16() uint16 { return uint16(r.byte())<<8 | uint16(r.byte()) }

func (r *bytesReader) bytes(n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = r.byte()
	}
	return out
}

// addr decodes any kind of netip.Addr: invalid, IPv4, IPv6 (mapped or
// not), with or without a zone.
func (r *bytesReader) addr() netip.Addr {
	switch k := r.byte(); k % 6 {
	case 0:
		return netip.Addr{}
	case 1, 2:
		return netip.AddrFrom4([4]byte(r.bytes(4)))
	case 3:
		return netip.AddrFrom16([16]byte(r.bytes(16)))
	case 4:
		return netip.AddrFrom16([16]byte(r.bytes(16))).WithZone(string(r.bytes(int(r.byte() % 4))))
	default:
		// Interesting fixed ones, so the fuzzer meets them often.
		fixed := []string{"0.0.0.0", "::", "::ffff:0.0.0.0", "127.0.0.1", "::1", "::ffff:127.0.0.1", "fe80::1%1", "fe80::1", "ff02::1%2", "224.0.0.1", "255.255.255.255", "127.0.0.6"}
		return netip.MustParseAddr(fixed[int(r.byte())%len(fixed)])
	}
}

// errnoOf checks that err, if any, wraps a syscall errno.
func errnoOf(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		t.Fatalf("%s: error %q wraps no errno", what, err)
	}
}

// FuzzConfigAndAddrs feeds raw bytes as configs, addresses and options:
// every call must return a result or an errno-carrying error, never panic,
// and the table must stay consistent.
func FuzzConfigAndAddrs(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x05\x01\x7f\x00\x00\x01\x00\x35"))
	f.Add([]byte{0, 1, 0, 0, 255, 3, 1, 0x80, 0, 0x80, 0x10, 2, 5, 3, 5, 0, 0, 53, 1, 5, 4, 0, 53})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &bytesReader{data}
		cfg := demux.Config{
			Slots:     int(binary.BigEndian.Uint32(r.bytes(4))) % (1 << 18),
			Threshold: int(int8(r.byte())),
			Strategy:  demux.Strategy(r.byte() % 4),
			Ephemeral: demux.Ephemeral(r.byte() % 4),
			PortLow:   r.u16(),
			PortHigh:  r.u16(),
		}
		for range r.byte() % 4 {
			cfg.ReservedPorts = append(cfg.ReservedPorts, r.u16())
		}
		if r.byte()&1 == 0 {
			cfg.Slots &^= cfg.Slots - 1 // often a power of two
		}
		tab, err := demux.New[int](cfg)
		errnoOf(t, "New", err)
		if err != nil {
			return
		}
		var socks []*demux.Socket[int]
		for i := 0; len(r.b) > 0 && i < 64; i++ {
			switch r.byte() % 5 {
			case 0, 1:
				o := demux.Options{Addr: r.addr(), Port: r.u16() % 8, Device: int(int8(r.byte()))}
				flags := r.byte()
				o.ReuseAddr, o.ReusePort, o.V6Only = flags&1 != 0, flags&2 != 0, flags&4 != 0
				s, err := tab.Bind(o, i)
				errnoOf(t, "Bind", err)
				if err == nil {
					socks = append(socks, s)
				}
			case 2:
				if len(socks) > 0 {
					s := socks[int(r.byte())%len(socks)]
					errnoOf(t, "Connect", tab.Connect(s, netip.AddrPortFrom(r.addr(), r.u16()%4), r.addr()))
				}
			case 3:
				if len(socks) > 0 {
					errnoOf(t, "Close", tab.Close(socks[int(r.byte())%len(socks)]))
				}
			case 4:
				src, dst := netip.AddrPortFrom(r.addr(), r.u16()), netip.AddrPortFrom(r.addr(), r.u16()%8)
				ifindex := int(int8(r.byte()))
				tab.Lookup(src, dst, ifindex)
				tab.LookupMulticast(src, dst, ifindex, func(*demux.Socket[int], int) bool { return true })
			}
			if i%16 == 15 {
				if err := tab.Verify(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := tab.Verify(); err != nil {
			t.Fatal(err)
		}
	})
}
