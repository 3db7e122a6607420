package hash2

import (
	"math/bits"

	"github.com/udpdemux/udpdemux/internal/sock"
)

// XXH64 constants.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

// xxh64x16 is XXH64 with a seed over exactly 16 bytes, given as their two
// little-endian 64-bit words. Specialised so that it inlines on the lookup
// path; TestXXH64 checks it against github.com/cespare/xxhash/v2.
func xxh64x16(seed, w0, w1 uint64) uint64 {
	h := seed + prime5 + 16
	h ^= round(w0)
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= round(w1)
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

func round(w uint64) uint64 {
	return bits.RotateLeft64(w*prime2, 31) * prime1
}

// Hash64 is the seeded 64-bit hash of a 16-byte address that the growing
// tables key on: the same XXH64 of the address's bytes in network order.
func Hash64(seed uint64, a sock.Addr16) uint64 {
	return xxh64x16(seed, bits.ReverseBytes64(a.Hi), bits.ReverseBytes64(a.Lo))
}
