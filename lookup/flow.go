package lookup

import (
	"math/bits"
)

// FlowHash hashes a datagram's 4-tuple with a per-table seed, to pick an
// SO_REUSEPORT group member: stable for one flow, spread across flows
// (DESIGN.md row 11). It multiplies the two halves of the tuple, each
// keyed by the seed, into 128-bit products, side by side, and mixes what
// they fold to: three multiplications in a row, where mixing the four
// words one after another took eight. The tuple's words also join the
// fold as they are, turned by half a word so that they cannot cancel what
// a product of 1 passes through: the one value of an operand that makes
// its product 0 or 1 must not send every flow to one member.
func FlowHash(seed uint64, q *Query) uint32 {
	ports := uint64(q.SrcPort)<<16 | uint64(q.DstPort)
	h1, l1 := bits.Mul64(q.Src.Lo^seed, q.Dst.Lo^ports^seed^flowKey1)
	h2, l2 := bits.Mul64(q.Src.Hi^seed^flowKey2, q.Dst.Hi^seed^flowKey3)
	raw := bits.RotateLeft64(q.Src.Lo^q.Src.Hi^q.Dst.Lo^q.Dst.Hi^ports, 32)
	return uint32(Mix(h1^l1^h2^l2^raw) >> 32)
}

// The keys that, with the seed, make FlowHash's four operands differ from
// one another even when the tuple's words are equal (the upper halves of
// IPv4 addresses are all 0): odd constants with bits spread over the word.
const (
	flowKey1 = 0x9e3779b97f4a7c15
	flowKey2 = 0xbf58476d1ce4e5b9
	flowKey3 = 0x94d049bb133111eb
)

// Mix is the splitmix64 finalizer: a bijection of 64-bit words whose
// output bits each depend on every input bit.
func Mix(x uint64) uint64 {
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

// flow returns q's addressing and flow hash as a group's selector sees
// them. It is a value, so that handing it to a selector moves nothing of
// the lookup to the heap.
func (q *Query) flow(hash uint32) Flow {
	return Flow{Src: q.Src, Dst: q.Dst, SrcPort: q.SrcPort, DstPort: q.DstPort,
		Ifindex: q.Ifindex, Is4: q.is4, Hash: hash, Payload: q.Payload}
}

// Receiver returns what receives q when e wins: e's Ref, or, if e is
// in an SO_REUSEPORT group of several members, the Ref of the member that
// q's flow goes to (see Member), which it copies into q: the result lives
// as long as q and e.
// Its tests of e stay small enough to inline on the lookup path, where
// most winners are in no group.
func Receiver(seed uint64, e *Face, q *Query) *Ref {
	if e == nil {
		return nil
	}
	if e.Group == nil {
		return &e.Ref
	}
	return group(seed, e, q)
}

// group is Receiver for e, a winner in an SO_REUSEPORT group.
func group(seed uint64, e *Face, q *Query) *Ref {
	v := e.Group.View()
	if v.Len() < 2 {
		return &e.Ref
	}
	q.picked = v.Ref(choose(e.Group, v, seed, q))
	return &q.picked
}

// Member returns the member of g that receives q: the one g's selector
// picks, else the one q's flow hashes to; nil if g is empty.
func Member(g *Group, seed uint64, q *Query) *Entry {
	v := g.View()
	if v.Len() == 0 {
		return nil
	}
	return v.At(choose(g, v, seed, q))
}

// choose returns the index in v, g's members, of the one that receives q.
// v is not empty.
func choose(g *Group, v View, seed uint64, q *Query) int {
	h := FlowHash(seed, q)
	if sel := g.Selector(); sel != nil {
		if i := sel(q.flow(h), v); uint(i) < uint(v.Len()) {
			return i
		}
	}
	return Pick(h, v.Len())
}
