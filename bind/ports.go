package bind

import (
	"fmt"
	"math/bits"
	"syscall"

	"math/rand/v2"

	"github.com/udpdemux/udpdemux/lockorder"
)

// Default ephemeral range (Linux ip_local_port_range).
const (
	defaultLow  = 32768
	defaultHigh = 60999
)

const words = 65536 / 64

// bitmap is a set of ports.
type bitmap [words]uint64

func (b *bitmap) set(p uint16)      { b[p>>6] |= 1 << (p & 63) }
func (b *bitmap) has(p uint16) bool { return b[p>>6]&(1<<(p&63)) != 0 }
func selectBit(w uint64, k int) uint16 { // index of the k-th (0-based) set bit of w
	for ; k > 0; k-- {
		w &= w - 1
	}
	return uint16(bits.TrailingZeros64(w))
}

// Range is the ephemeral port range and the reserved ports. It is
// immutable. The reserved ports' bitmap exists only if some are reserved,
// so that a table costs no 8 KiB for a list most tables leave empty.
type Range struct {
	Low, High uint16
	reserved  *bitmap // nil: none
	size      int     // ports bind(0) may choose
}

// NewRange checks and builds a range; low = high = 0 means the default.
func NewRange(low, high uint16, reserved []uint16) (*Range, error) {
	if low == 0 && high == 0 {
		low, high = defaultLow, defaultHigh
	}
	if low == 0 || low > high {
		return nil, fmt.Errorf("ephemeral range %d-%d: want 1 <= low <= high <= 65535: %w", low, high, syscall.EINVAL)
	}
	r := &Range{Low: low, High: high}
	if len(reserved) > 0 {
		r.reserved = new(bitmap)
		for _, p := range reserved {
			r.reserved.set(p)
		}
	}
	for w := int(low >> 6); w <= int(high>>6); w++ {
		r.size += bits.OnesCount64(r.allowedWord(w))
	}
	return r, nil
}

// allowed reports whether bind(0) may choose p.
func (r *Range) allowed(p uint16) bool { return p >= r.Low && p <= r.High && !r.reservedPort(p) }

// reservedPort reports whether p is reserved.
func (r *Range) reservedPort(p uint16) bool { return r.reserved != nil && r.reserved.has(p) }

// allowedWord returns the ports of bitmap word w (ports 64w to 64w+63)
// that bind(0) may choose: every word between those of Low and High is
// whole.
func (r *Range) allowedWord(w int) uint64 {
	lw, hw := int(r.Low>>6), int(r.High>>6)
	if w < lw || w > hw {
		return 0
	}
	m := ^uint64(0)
	if w == lw {
		m &= ^uint64(0) << (r.Low & 63)
	}
	if w == hw {
		m &= ^uint64(0) >> (63 - r.High&63)
	}
	if r.reserved != nil {
		m &^= r.reserved[w]
	}
	return m
}

// Rand is a random source safe for concurrent use.
type Rand struct {
	mu  lockorder.Mutex
	src rand.Source // nil: rand.Uint64, the runtime's generator
}

// NewRand wraps src, which need not be safe for concurrent use. A nil src
// means math/rand/v2's top-level generator: ChaCha8, seeded by the runtime
// from the system's entropy and kept per thread, so that concurrent
// draws take no lock (a locked source's draws took about a tenth of a
// bind(0)'s CPU profile).
func NewRand(src rand.Source) *Rand { return &Rand{src: src} }

// Uint64 returns a random 64-bit value, for a caller that is not a write
// (a table's seeds).
func (r *Rand) Uint64() uint64 { return r.draw(nil) }

// draw returns a random 64-bit value for the write whose Guard is g,
// which takes the source's lock, if it has one.
func (r *Rand) draw(g *lockorder.Guard) uint64 {
	if r.src == nil {
		return rand.Uint64()
	}
	g.Locking(lockorder.Source, &r.mu).Lock()
	// Deferred: a source that panics must not leave every later draw
	// waiting for the lock.
	defer func() { g.Unlocking(lockorder.Source, &r.mu).Unlock() }()
	return r.src.Uint64()
}

// rand32 returns a random 32-bit value for g's write.
func (r *Rand) rand32(g *lockorder.Guard) uint32 { return uint32(r.draw(g) >> 32) }

// rejectTries bounds IntN's rejection loop. A working source is rejected
// with probability below n/2^64 per draw, so only a broken one (a constant,
// say) reaches the bound; IntN then keeps the last draw's slightly biased
// value rather than spin forever.
const rejectTries = 16

// IntN returns a value in [0, n), n > 0, for the write whose Guard is g:
// uniform, without modulo bias, for any source that is not broken, and in
// range whatever the source returns.
func (r *Rand) IntN(g *lockorder.Guard, n int) int {
	// Lemire's multiply-and-reject.
	un := uint64(n)
	var hi uint64
	for range rejectTries {
		var lo uint64
		hi, lo = bits.Mul64(r.draw(g), un)
		if lo >= un || lo >= -un%un {
			break
		}
	}
	return int(hi)
}
