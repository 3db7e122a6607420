package bind

import (
	"math/bits"
	"sync/atomic"

	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// Occupancy indexes which ports hold sockets, so bind(0) can pick
// uniformly among unused ports in O(range/64) and fail in O(1) when every
// port holds a socket that blocks the new one.
//
// A blocker is a socket on a wildcard address with no ReuseAddr, no
// ReusePort and no device: every new socket of the families it reaches
// conflicts with it. An IPv4 0.0.0.0 (or ::ffff:0.0.0.0) blocker blocks
// sockets that reach IPv4; an IPv6 "::" V6Only one, those that reach IPv6;
// a dual-stack "::" one, all.
//
// The per-port counts are guarded by the port's lock; the bitmaps
// summarise them and are read without locks. Both are sparse: a table
// whose sockets use a few ports pays for those, not for 65 536 (a flat
// array of counts and bitmaps cost 536 KiB a table).
type Occupancy struct {
	// OnPort, if set, hears when a port comes into use and goes out of
	// use; see Claim and Release. It is called with the port's lock held.
	OnPort func(port uint16, inUse bool) error
	// Range is the range of bind(0), whose ports the index counts. Set
	// it before the first Add.
	Range    *Range
	inRange  rangeCounts
	total    atomic.Int64 // sockets counted, for Verify
	counts   [countDirs]atomic.Pointer[[countDir]atomic.Pointer[[countPage]portCount]]
	used     sparseBits
	blocked4 sparseBits
	blocked6 sparseBits
}

// The per-port counts sit in pages of countPage ports, which directories
// of countDir pages point to; both are made when a port they cover is
// first counted and kept after, so that a table with a few ports pays
// about a kilobyte, as a map did. Each count is guarded by its port's
// lock alone: no map, and no lock of the index's own, on a write's path
// (with them, a bind(0) and its close took about a fifth longer).
const (
	countPage = 16
	countDir  = 64
	countDirs = 65536 / (countPage * countDir)
)

// count returns p's count, making its page if create is set (or returning
// nil if it was never made). The caller holds p's lock; writers of other
// ports of a page or directory may race to make it, and one wins.
func (o *Occupancy) count(p uint16, create bool) *portCount {
	dir := made(&o.counts[p/(countPage*countDir)], create)
	if dir == nil {
		return nil
	}
	page := made(&dir[p/countPage%countDir], create)
	if page == nil {
		return nil
	}
	return &page[p%countPage]
}

// made returns *at, first making it if it is nil and create is set (else
// nil). Writers of different ports may race to make it; one wins.
func made[T any](at *atomic.Pointer[T], create bool) *T {
	v := at.Load()
	if v == nil && create {
		at.CompareAndSwap(nil, new(T))
		v = at.Load()
	}
	return v
}

// sparseBits is a bitmap of the 65 536 ports in pages of 1024 ports,
// allocated when a port of the page is first set and kept after.
type sparseBits struct {
	pages [pages]atomic.Pointer[[pageWords]atomic.Uint64]
}

const (
	pageWords = 16 // 1024 ports
	pages     = words / pageWords
)

// word returns word w of the bitmap (0 if its page was never set).
func (b *sparseBits) word(w int) uint64 {
	if p := b.pages[w/pageWords].Load(); p != nil {
		return p[w%pageWords].Load()
	}
	return 0
}

// set sets or clears bit p; the caller holds p's lock, and pages are made
// under a compare-and-swap since ports of one page have different locks.
func (b *sparseBits) set(p uint16, on bool) {
	w := int(p >> 6)
	pg := made(&b.pages[w/pageWords], on)
	if pg == nil {
		return
	}
	if on {
		pg[w%pageWords].Or(1 << (p & 63))
	} else {
		pg[w%pageWords].And(^uint64(1 << (p & 63)))
	}
}

func (b *sparseBits) has(p uint16) bool { return b.word(int(p>>6))&(1<<(p&63)) != 0 }

// rangeCounts counts the ports of the range that hold a socket, that hold
// a blocker of IPv4, of IPv6, and of either: a census in O(1).
type rangeCounts struct {
	used, b4, b6, b46 atomic.Int32
}

// add moves the counts of one port of the range from was to now.
func (rc *rangeCounts) add(was, now portCount) {
	step := func(c *atomic.Int32, a, b bool) {
		switch {
		case !a && b:
			c.Add(1)
		case a && !b:
			c.Add(-1)
		}
	}
	step(&rc.used, was.users != 0, now.users != 0)
	step(&rc.b4, was.b4 != 0, now.b4 != 0)
	step(&rc.b6, was.b6 != 0, now.b6 != 0)
	step(&rc.b46, was.b4|was.b6 != 0, now.b4|now.b6 != 0)
}

type portCount struct {
	users  uint32
	b4, b6 uint16
}

// Users returns the number of sockets on p. The caller holds p's lock.
func (o *Occupancy) Users(p uint16) int {
	if c := o.count(p, false); c != nil {
		return int(c.users)
	}
	return 0
}

// Total returns the number of sockets counted over all ports.
func (o *Occupancy) Total() int { return int(o.total.Load()) }

// InUse reports whether p holds a socket, from the index, without a lock:
// a hint that the caller confirms with Users under p's slot lock.
func (o *Occupancy) InUse(p uint16) bool { return o.used.has(p) }

// Add counts e on its port. The caller holds the port's primary slot lock.
func (o *Occupancy) Add(e *lookup.Entry) { o.update(e, 1) }

// Remove uncounts e. The caller holds the port's primary slot lock.
func (o *Occupancy) Remove(e *lookup.Entry) { o.update(e, -1) }

func (o *Occupancy) update(e *lookup.Entry, d int) {
	p := e.Port
	at := o.count(p, true)
	was := *at
	c := was
	c.users = uint32(int(c.users) + d)
	b4, b6 := blocks(e)
	if b4 {
		c.b4 = uint16(int(c.b4) + d)
	}
	if b6 {
		c.b6 = uint16(int(c.b6) + d)
	}
	*at = c
	o.total.Add(int64(d))
	if o.Range != nil && o.Range.allowed(p) {
		o.inRange.add(was, c)
	}
	o.used.set(p, c.users != 0)
	if b4 {
		o.blocked4.set(p, c.b4 != 0)
	}
	if b6 {
		o.blocked6.set(p, c.b6 != 0)
	}
}

// blocks reports which families of new sockets e blocks outright.
func blocks(e *lookup.Entry) (b4, b6 bool) {
	if e.Flags&(lookup.ReuseAddr|lookup.ReusePort) != 0 || e.Device != 0 || !e.IsWild() {
		return false, false
	}
	if !e.Has(lookup.Is6) || e.V6.IsMapped() {
		return true, false
	}
	return !e.Has(lookup.V6Only), true
}

// reaches reports which families a new socket n reaches, for blocking.
func reaches(n *lookup.Entry) (r4, r6 bool) {
	if !n.Has(lookup.Is6) || n.V6.IsMapped() {
		return true, false
	}
	return n.V6 == lookup.Wild6 && !n.Has(lookup.V6Only), true
}

// census counts the ports of the range with no socket, and reports
// whether some port of the range holds no socket that blocks n outright,
// from the range's counts.
func (o *Occupancy) census(n *lookup.Entry) (free int, unblocked bool) {
	size := int32(o.Range.size)
	blocked := &o.inRange.b46
	switch r4, r6 := reaches(n); {
	case !r6:
		blocked = &o.inRange.b4
	case !r4:
		blocked = &o.inRange.b6
	}
	return int(size - o.inRange.used.Load()), blocked.Load() < size
}

// sampleTries is how many ports of the range takeFree draws at random
// before it counts the free ones: when many are free, one of a few draws
// is.
const sampleTries = 4

// indexTries bounds the retries when a port picked from the index is taken
// by a concurrent bind before the caller locks it.
const indexTries = 8

// takeFree picks a port of the range that holds no socket, uniformly,
// locks it with lock, and keeps it, with n.Port set, if it is still free
// (InUse, exact under the port's lock), or releases it with unlock: a
// concurrent bind may have taken it since the index said so. It first
// draws a few ports at random: rejection sampling, uniform over the free
// ports and cheap when many are free. Only when those miss does it count
// the free ports and pick among them, which is uniform too. It reports
// whether it kept a port; if not, search says whether a port that holds
// sockets may still take n, which only a search of the used ports can
// tell (false: every port holds a socket that blocks n outright). Its
// draws take the random source's lock through g, the write's Guard, which
// holds nothing between the ports it tries.
func (o *Occupancy) takeFree(rnd *Rand, g *lockorder.Guard, n *lookup.Entry, lock func(uint16), unlock func()) (took, search bool) {
	take := func(p uint16) bool {
		lock(p)
		if !o.InUse(p) { // exact under p's lock, which every writer of p holds
			n.Port = p
			return true
		}
		unlock()
		return false
	}
	r := o.Range
	remaining := int(r.High-r.Low) + 1
	for range sampleTries {
		p := r.Low + uint16(rnd.IntN(g, remaining))
		if r.allowed(p) && !o.InUse(p) && take(p) {
			return true, false
		}
	}
	for range indexTries {
		free, unblocked := o.census(n)
		if free == 0 {
			return false, unblocked
		}
		if p, ok := o.kthFree(rnd.IntN(g, free)); ok && take(p) {
			return true, false
		}
	}
	return false, true
}

// CheckCounts reports whether the range's counts agree with the bitmaps,
// counted again word by word. Call it when no write is in flight.
func (o *Occupancy) CheckCounts() bool {
	r := o.Range
	var used, b4, b6, b46 int
	for w := int(r.Low >> 6); w <= int(r.High>>6); w++ {
		a := r.allowedWord(w)
		x4, x6 := o.blocked4.word(w), o.blocked6.word(w)
		used += bits.OnesCount64(a & o.used.word(w))
		b4 += bits.OnesCount64(a & x4)
		b6 += bits.OnesCount64(a & x6)
		b46 += bits.OnesCount64(a & (x4 | x6))
	}
	c := &o.inRange
	return int(c.used.Load()) == used && int(c.b4.Load()) == b4 && int(c.b6.Load()) == b6 && int(c.b46.Load()) == b46
}

// kthFree returns the k-th (from 0) port of the range with no socket, or false if
// the index changed since census and there is no such port any more.
func (o *Occupancy) kthFree(k int) (uint16, bool) {
	r := o.Range
	for w := int(r.Low >> 6); w <= int(r.High>>6); w++ {
		free := r.allowedWord(w) &^ o.used.word(w)
		n := bits.OnesCount64(free)
		if k < n {
			return uint16(w<<6) | selectBit(free, k), true
		}
		k -= n
	}
	return 0, false
}
