package suite

import (
	"fmt"
	"net/netip"
	"testing"
)

// groupMapFixture is the map floor of a SO_REUSEPORT group: a Go map from
// the group's address and port to its members, probed once, and a member
// picked by a cheap hash of the source, as the least a user-space
// demultiplexer could do.
type groupMapFixture struct {
	m    map[netip.AddrPort][]int32
	sets []Set
}

func buildGroupMap(sh *Shape) *groupMapFixture {
	f := &groupMapFixture{m: map[netip.AddrPort][]int32{}, sets: sh.Sets}
	for i := range sh.Socks {
		k := sh.Socks[i].Key()
		f.m[k] = append(f.m[k], int32(i))
	}
	return f
}

// pick returns the member of dst's group that receives a datagram from
// src, or -1.
func (f *groupMapFixture) pick(src, dst netip.AddrPort) int32 {
	ms := f.m[dst]
	if len(ms) == 0 {
		return -1
	}
	a := src.Addr().As16()
	h := (uint64(a[12])<<24 | uint64(a[13])<<16 | uint64(a[14])<<8 | uint64(a[15])) ^ uint64(src.Port())<<32
	h *= 0x9e3779b97f4a7c15
	return ms[(h>>32)*uint64(len(ms))>>32]
}

// Bench implements Fixture.
func (f *groupMapFixture) Bench(i int) func(*testing.B) {
	ds := f.sets[i].D
	return func(b *testing.B) {
		b.ReportAllocs()
		var sum int64
		n, j := len(ds), 0
		for b.Loop() {
			sum += int64(f.pick(ds[j].Src, ds[j].Dst))
			if j++; j == n {
				j = 0
			}
		}
		Sink += sum
	}
}

// Check implements Fixture.
func (f *groupMapFixture) Check(i, max int) error {
	_, look := f.Looker(i)
	n := len(f.sets[i].D)
	if max > 0 && max < n {
		n = max
	}
	if w := look(0, n); w > 0 {
		return fmt.Errorf("map: %d of %d datagrams found no member", w, n)
	}
	return nil
}

// Looker implements Fixture.
func (f *groupMapFixture) Looker(i int) (int, func(from, count int) uint64) {
	ds := f.sets[i].D
	return len(ds), func(from, count int) (wrong uint64) {
		for k := from; k < from+count; k++ {
			d := &ds[k]
			if !d.accepts(f.pick(d.Src, d.Dst)) {
				wrong++
			}
		}
		return wrong
	}
}

// Writer returns nil: a Go map cannot be written while it is read.
func (f *groupMapFixture) Writer() func() error { return nil }

// Verify implements Fixture; a map has nothing to check.
func (f *groupMapFixture) Verify() error { return nil }

// Close implements Fixture.
func (f *groupMapFixture) Close() {}

var _ Fixture = (*groupMapFixture)(nil)
