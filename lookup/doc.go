// Package lookup is what every storage's search shares: the score of a
// candidate socket for a datagram, the rule that picks the best one, and
// the flow hash that picks an SO_REUSEPORT group's member. Each storage
// searches its own structures with them (package grow for the default
// storage, package fixed for Linux's fixed tables), so that every storage
// and strategy gives the same answer.
//
// A candidate has the datagram's port, its address or a wildcard that
// reaches it, its source as remote if connected, and a compatible device.
// Exact-address candidates beat every wildcard one; within a tier the
// score is 2 for an IPv4 socket receiving IPv4 (else 1), +8 if connected,
// +4 if bound to a device; ties go to the most recently bound. A winner in
// an SO_REUSEPORT group hands over to the member the flow hash picks.
//
// This is an implementation package of udpdemux, exported only so that the
// module's other packages can use it: its API may change in any release,
// with no compatibility promise. Programs use package demux.
package lookup
