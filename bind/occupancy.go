package bind

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/udpdemux/udpdemux/internal/sock"
)

// Occupancy indexes which ports hold sockets, so bind(0) can pick
// uniformly among unused ports in O(range/64) and fail at once when every
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
	OnPort   func(port uint16, inUse bool) error
	total    atomic.Int64 // sockets counted, for Verify
	counts   [countStripes]countStripe
	used     sparseBits
	blocked4 sparseBits
	blocked6 sparseBits
}

// countStripes spreads the per-port counts over maps with their own
// locks, so that writers of different ports seldom meet.
const countStripes = 64

type countStripe struct {
	mu sync.Mutex
	m  map[uint16]portCount
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
	pg := b.pages[w/pageWords].Load()
	if pg == nil {
		if !on {
			return
		}
		b.pages[w/pageWords].CompareAndSwap(nil, new([pageWords]atomic.Uint64))
		pg = b.pages[w/pageWords].Load()
	}
	if on {
		pg[w%pageWords].Or(1 << (p & 63))
	} else {
		pg[w%pageWords].And(^uint64(1 << (p & 63)))
	}
}

func (b *sparseBits) has(p uint16) bool { return b.word(int(p>>6))&(1<<(p&63)) != 0 }

type portCount struct {
	users  uint32
	b4, b6 uint16
}

// Users returns the number of sockets on p. The caller holds p's lock.
func (o *Occupancy) Users(p uint16) int {
	st := &o.counts[p%countStripes]
	st.mu.Lock()
	defer st.mu.Unlock()
	return int(st.m[p].users)
}

// Total returns the number of sockets counted over all ports.
func (o *Occupancy) Total() int { return int(o.total.Load()) }

// InUse reports whether p holds a socket, from the index, without a lock:
// a hint that the caller confirms with Users under p's slot lock.
func (o *Occupancy) InUse(p uint16) bool { return o.used.has(p) }

// Add counts e on its port. The caller holds the port's primary slot lock.
func (o *Occupancy) Add(e *sock.Entry) { o.update(e, 1) }

// Remove uncounts e. The caller holds the port's primary slot lock.
func (o *Occupancy) Remove(e *sock.Entry) { o.update(e, -1) }

func (o *Occupancy) update(e *sock.Entry, d int) {
	p := e.Port
	st := &o.counts[p%countStripes]
	st.mu.Lock()
	c := st.m[p]
	c.users = uint32(int(c.users) + d)
	b4, b6 := blocks(e)
	if b4 {
		c.b4 = uint16(int(c.b4) + d)
	}
	if b6 {
		c.b6 = uint16(int(c.b6) + d)
	}
	if c == (portCount{}) {
		delete(st.m, p)
	} else {
		if st.m == nil {
			st.m = map[uint16]portCount{}
		}
		st.m[p] = c
	}
	st.mu.Unlock()
	o.total.Add(int64(d))
	o.used.set(p, c.users != 0)
	if b4 {
		o.blocked4.set(p, c.b4 != 0)
	}
	if b6 {
		o.blocked6.set(p, c.b6 != 0)
	}
}

// blocks reports which families of new sockets e blocks outright.
func blocks(e *sock.Entry) (b4, b6 bool) {
	if e.Flags&(sock.ReuseAddr|sock.ReusePort) != 0 || e.Device != 0 || !e.IsWild() {
		return false, false
	}
	if !e.Has(sock.Is6) || e.V6.IsMapped() {
		return true, false
	}
	return !e.Has(sock.V6Only), true
}

// reaches reports which families a new socket n reaches, for blocking.
func reaches(n *sock.Entry) (r4, r6 bool) {
	if !n.Has(sock.Is6) || n.V6.IsMapped() {
		return true, false
	}
	return n.V6 == sock.Wild6 && !n.Has(sock.V6Only), true
}

// census counts the ports of r with no socket, and reports whether some
// port of r holds no socket that blocks n outright, in one pass over the
// range's bitmap words.
func (o *Occupancy) census(r *Range, n *sock.Entry) (free int, unblocked bool) {
	r4, r6 := reaches(n)
	var none [pageWords]atomic.Uint64 // stands for a page never made
	page := func(b *sparseBits, pg int) *[pageWords]atomic.Uint64 {
		if p := b.pages[pg].Load(); p != nil {
			return p
		}
		return &none
	}
	for w, last := int(r.Low>>6), int(r.High>>6); w <= last; {
		pg := w / pageWords
		used, b4, b6 := page(&o.used, pg), page(&o.blocked4, pg), page(&o.blocked6, pg)
		for end := min(last, pg*pageWords+pageWords-1); w <= end; w++ {
			a := r.allowedWord(w)
			free += bits.OnesCount64(a &^ used[w%pageWords].Load())
			if unblocked {
				continue
			}
			var b uint64
			if r4 {
				b |= b4[w%pageWords].Load()
			}
			if r6 {
				b |= b6[w%pageWords].Load()
			}
			unblocked = a&^b != 0
		}
	}
	return free, unblocked
}

// kthFree returns the k-th (from 0) port of r with no socket, or false if
// the index changed since census and there is no such port any more.
func (o *Occupancy) kthFree(r *Range, k int) (uint16, bool) {
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

// Census counts the ports of r that hold no socket, and reports whether
// some port of r holds no socket that blocks n outright: one pass over the
// range's bitmap words.
func (o *Occupancy) Census(r *Range, n *sock.Entry) (free int, unblocked bool) { return o.census(r, n) }

// KthFree returns the k-th (from 0) port of r that holds no socket, or
// false if the index changed since Census and there is no such port.
func (o *Occupancy) KthFree(r *Range, k int) (uint16, bool) { return o.kthFree(r, k) }
