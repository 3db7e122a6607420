package demux_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/netip"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

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

// u64 reads eight bytes.
func (r *bytesReader) u64() uint64 { return binary.BigEndian.Uint64(r.bytes(8)) }

// edges are integers at the limits of the types an index may pass through.
var edges = []int64{0, 1, -1, 3, math.MaxInt32, math.MaxInt32 + 1, math.MinInt32, math.MaxUint32,
	math.MaxUint32 + 1, math.MaxUint32 + 4, math.MaxInt64, math.MinInt64}

// index decodes an interface index or device: often small, else any int,
// else one at a limit of int32 or uint32.
func (r *bytesReader) index() int {
	switch k := r.byte(); k % 4 {
	case 0, 1:
		return int(int8(r.byte()))
	case 2:
		return int(int64(r.u64()))
	default:
		return int(edges[int(r.byte())%len(edges)])
	}
}

// port decodes a port: mostly one of a few, so that sockets meet.
func (r *bytesReader) port() uint16 {
	if k := r.byte(); k%4 == 0 {
		return r.u16()
	}
	return r.u16() % 8
}

// source decodes Config.Rand: nil, a seeded generator, or a broken one
// (constant, or a typed nil).
func (r *bytesReader) source() mrand.Source {
	switch k, v := r.byte(), r.u64(); k % 6 {
	case 0:
		return nil
	case 1:
		return mrand.NewPCG(v, 1)
	case 2:
		return constSource(0)
	case 3:
		return constSource(1 << 63)
	case 4:
		return constSource(v)
	default:
		return (*mrand.ChaCha8)(nil)
	}
}

// fuzzRun is one run of the FuzzConfigAndAddrs body: it records its
// failures, to be reported by the test goroutine, and stops at the first.
type fuzzRun struct {
	mu   sync.Mutex
	errs []string
}

type fuzzAbort struct{}

func (f *fuzzRun) fail(format string, args ...any) {
	f.mu.Lock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	panic(fuzzAbort{})
}

// errno checks that err, if any, wraps a syscall errno.
func (f *fuzzRun) errno(what string, err error) {
	var errno syscall.Errno
	if err != nil && !errors.As(err, &errno) {
		f.fail("%s: error %q wraps no errno", what, err)
	}
}

// sockState is what a socket's methods report.
type sockState struct {
	Local, Remote     netip.AddrPort
	Closed, Connected bool
	Opts              demux.Options
}

func stateOf(s *demux.Socket[int]) sockState {
	return sockState{s.LocalAddr(), s.RemoteAddr(), s.Closed(), s.Connected(), s.Options()}
}

// fuzzTimeout is how long one input may run: none needs more than a few
// milliseconds, so a run that takes this long hangs.
const fuzzTimeout = 2 * time.Second

// FuzzConfigAndAddrs feeds raw bytes as configs (random sources that are
// constant or typed nil included, and zone indexes of any int), addresses
// and options (devices and interface indexes of any int, at the limits of
// int32 and uint32 too): every call must return within fuzzTimeout with a
// result or an errno-carrying error, never panic; a call that fails must
// leave the table as it was; an index is never cut down to another (a
// socket's device is one it was given, a lookup on interface i finds no
// socket bound to another device); and the table stays consistent.
func FuzzConfigAndAddrs(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x05\x01\x7f\x00\x00\x01\x00\x35"))
	f.Add([]byte{0, 1, 0, 0, 255, 3, 1, 0x80, 0, 0x80, 0x10, 2, 5, 3, 5, 0, 0, 53, 1, 5, 4, 0, 53})
	f.Fuzz(func(t *testing.T, data []byte) {
		run := &fuzzRun{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() {
				if p := recover(); p != nil {
					if _, ok := p.(fuzzAbort); !ok {
						run.mu.Lock()
						run.errs = append(run.errs, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
						run.mu.Unlock()
					}
				}
			}()
			run.body(data)
		}()
		select {
		case <-done:
		case <-time.After(fuzzTimeout):
			t.Fatalf("still running after %v: a call hangs", fuzzTimeout)
		}
		for _, e := range run.errs {
			t.Error(e)
		}
	})
}

func (f *fuzzRun) body(data []byte) {
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
	cfg.Rand = r.source()
	// Zones map to one of two indexes, or fail.
	zones := [2]int{r.index(), r.index()}
	zoneFails := r.byte()&1 != 0
	cfg.ZoneIndex = func(zone string) (int, error) {
		if zoneFails && len(zone) == 3 {
			return 0, fmt.Errorf("no interface %q", zone)
		}
		return zones[len(zone)%2], nil
	}
	// given reports whether d is a device the input named.
	given := func(d int, o demux.Options) bool {
		return d == 0 || d == o.Device || d == zones[0] || d == zones[1]
	}
	tab, err := demux.New[int](cfg)
	f.errno("New", err)
	if err != nil {
		return
	}
	var socks []*demux.Socket[int]
	var opts []demux.Options
	snapshot := func() (int, []sockState) {
		st := make([]sockState, len(socks))
		for i, s := range socks {
			st[i] = stateOf(s)
		}
		return tab.Len(), st
	}
	// unchanged checks that a failed call left the table as it was.
	unchanged := func(what string, n0 int, st0 []sockState) {
		n1, st1 := snapshot()
		if n1 != n0 || !slices.Equal(st0, st1) {
			f.fail("%s failed but changed the table: %d sockets, then %d; %+v, then %+v", what, n0, n1, st0, st1)
		}
		if err := tab.Verify(); err != nil {
			f.fail("after a failed %s: %v", what, err)
		}
	}
	for i := 0; len(r.b) > 0 && i < 64; i++ {
		n0, st0 := snapshot()
		switch r.byte() % 5 {
		case 0, 1:
			o := demux.Options{Addr: r.addr(), Port: r.port(), Device: r.index()}
			flags := r.byte()
			o.ReuseAddr, o.ReusePort, o.V6Only = flags&1 != 0, flags&2 != 0, flags&4 != 0
			s, err := tab.Bind(o, i)
			f.errno("Bind", err)
			if err != nil {
				unchanged(fmt.Sprintf("Bind %+v", o), n0, st0)
				break
			}
			if d := s.Options().Device; !given(d, o) {
				f.fail("Bind %+v: device %d, which neither the options nor the zone gave", o, d)
			}
			socks, opts = append(socks, s), append(opts, o)
		case 2:
			if len(socks) > 0 {
				k := int(r.byte()) % len(socks)
				s := socks[k]
				remote, local := netip.AddrPortFrom(r.addr(), r.u16()%4), r.addr()
				err := tab.Connect(s, remote, local)
				f.errno("Connect", err)
				if err != nil {
					unchanged(fmt.Sprintf("Connect %v to %v from %v", s.LocalAddr(), remote, local), n0, st0)
				} else if d := s.Options().Device; d != st0[k].Opts.Device && !given(d, opts[k]) {
					f.fail("Connect to %v: device %d, which neither the options nor a zone gave", remote, d)
				}
			}
		case 3:
			if len(socks) > 0 {
				s := socks[int(r.byte())%len(socks)]
				err := tab.Close(s)
				f.errno("Close", err)
				if err != nil {
					unchanged("Close", n0, st0)
				}
			}
		case 4:
			src, dst := netip.AddrPortFrom(r.addr(), r.u16()), netip.AddrPortFrom(r.addr(), r.port())
			ifindex := r.index()
			check := func(s *demux.Socket[int]) {
				if d := s.Options().Device; d != 0 && d != ifindex {
					f.fail("a datagram on interface %d reached a socket bound to device %d", ifindex, d)
				}
			}
			if s, _ := tab.Lookup(src, dst, ifindex); s != nil {
				check(s)
			}
			tab.LookupMulticast(src, dst, ifindex, func(s *demux.Socket[int], _ int) bool {
				check(s)
				return true
			})
		}
		if i%16 == 15 {
			if err := tab.Verify(); err != nil {
				f.fail("%v", err)
			}
		}
	}
	if err := tab.Verify(); err != nil {
		f.fail("%v", err)
	}
}
