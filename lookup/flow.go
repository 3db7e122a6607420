package lookup

import "github.com/udpdemux/udpdemux/internal/sock"

// FlowHash hashes a datagram's 4-tuple with a per-table seed, to pick an
// SO_REUSEPORT group member: stable for one flow, spread across flows
// (DESIGN.md row 11).
func FlowHash(seed uint64, q *Query) uint32 {
	h := seed ^ uint64(q.SrcPort)<<16 ^ uint64(q.DstPort)
	h = mix(h ^ q.Src.Hi)
	h = mix(h ^ q.Src.Lo)
	h = mix(h ^ q.Key.Hi)
	h = mix(h ^ q.Key.Lo)
	return uint32(h >> 32)
}

// mix is the splitmix64 finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Pick returns the group member at the flow hash's position among n
// members, scaled without a division.
func Pick(hash uint32, n int) int { return int(uint64(hash) * uint64(n) >> 32) }

// ReusePort hands a winner in an SO_REUSEPORT group over to the member
// that q's flow hashes to.
func ReusePort(seed uint64, e *sock.Face, q *Query) *sock.Face {
	if e == nil || e.Group == nil || e.Group.Len() < 2 {
		return e
	}
	if m := e.Group.Pick(FlowHash(seed, q)); m != nil {
		return &m.Face
	}
	return e
}
