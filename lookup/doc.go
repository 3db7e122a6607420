// Package lookup finds the socket that receives a datagram: the score of a
// candidate, and the three strategies that find the best one.
//
//   - One-phase scans the primary chain of the destination port.
//   - Two-phase searches the secondary slot of (destination address, port),
//     then the slot of (wildcard, port), skipping the second probe when an
//     exact-address socket was found or both land in the same slot.
//   - Hybrid is Linux 2.6.33's rule: two-phase when the primary chain is
//     longer than a threshold and not shorter than the secondary slot,
//     else one-phase.
//
// A candidate has the datagram's port, its address or a wildcard that
// reaches it, its source as remote if connected, and a compatible device.
// Exact-address candidates beat every wildcard one; within a tier the
// score is 2 for an IPv4 socket receiving IPv4 (else 1), +8 if connected,
// +4 if bound to a device; ties go to the most recently bound. A winner in
// an SO_REUSEPORT group hands over to the member the flow hash picks.
//
// Lookups take no lock: they read chains that writers publish atomically
// (package sock), and re-run a two-phase search if a socket may have moved
// between its two slots meanwhile.
//
// This is an implementation package of udpdemux, exported only so that the
// module's other packages can use it: its API may change in any release,
// with no compatibility promise. Programs use package demux.
package lookup
