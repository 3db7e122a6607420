package lookup

import "math/bits"

// XXH64's primes.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

// Hash returns XXH64 with the given seed of x's 16 bytes in network order:
// the address hash that both storages' secondary indexes key on.
// TestHash checks it against the xxhash library.
func (x Addr16) Hash(seed uint64) uint64 {
	// XXH64 reads its input as little-endian words.
	return xxh64x16(seed, bits.ReverseBytes64(x.Hi), bits.ReverseBytes64(x.Lo))
}

// xxh64x16 is XXH64 with a seed over exactly 16 bytes, given as their two
// little-endian words: specialised so that it inlines on the lookup path
// (TestInlining in hash2).
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

func round(w uint64) uint64 { return bits.RotateLeft64(w*prime2, 31) * prime1 }
