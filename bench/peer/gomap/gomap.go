// Package gomap is the floor of the lookup benchmarks: a plain Go map
// probed once with the exact key of the socket that receives a datagram.
// No demultiplexer can beat it, since it knows the answer's key in advance
// and does no wildcard, device or connected-peer matching.
package gomap

import "net/netip"

// Tuple is the key of a connected socket: its local and remote address
// and port. An unconnected socket has a zero Remote.
type Tuple struct {
	Local, Remote netip.AddrPort
}

// Key is the set of key types the floor is benchmarked with.
type Key interface {
	netip.AddrPort | Tuple
}

// Map maps each socket's exact key to its index.
type Map[K Key] struct {
	m map[K]int32
}

// New returns an empty map sized for n sockets.
func New[K Key](n int) *Map[K] {
	return &Map[K]{m: make(map[K]int32, n)}
}

// Insert adds a socket; it is the floor's "bind".
func (m *Map[K]) Insert(k K, v int32) { m.m[k] = v }

// Delete removes a socket.
func (m *Map[K]) Delete(k K) { delete(m.m, k) }

// Get is one exact probe; it returns -1 for a missing key.
func (m *Map[K]) Get(k K) int32 {
	if v, ok := m.m[k]; ok {
		return v
	}
	return -1
}

// Len returns the number of sockets.
func (m *Map[K]) Len() int { return len(m.m) }
