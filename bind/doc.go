// Package bind decides whether a socket may bind: the conflict rule between
// two sockets on one port, the explicit-port check that applies it to every
// socket that could conflict, and the choice of an ephemeral port for
// bind(0).
//
// The growing storage checks a busy port against its Summary instead of
// its sockets: the attributes that decide a conflict (reuse flags, family,
// addresses, device, owner), counted per class, by IPv4 address, by IPv6
// address, and, for wildcard binds, whose overlap depends only on the kind
// of the other side's address, with the address left out; sockets bound
// to a device are counted apart, by device. Its answer is Conflicts' on a
// representative of each class.
//
// Explicit-port checks follow the same hybrid rule as lookups: a bind to a
// specific address checks its own secondary slot and the wildcard one when
// the primary chain is long; a bind to a wildcard must see every socket on
// the port, so it scans the primary chain.
//
// bind(0) has three algorithms: an occupancy index that picks uniformly
// among the ports no socket uses (the default), Linux's chain bitmap search
// (2.6.30 onwards), and the probe-by-probe search before it (benchmarks
// only).
//
// This is an implementation package of udpdemux, exported only so that the
// module's other packages can use it: its API may change in any release,
// with no compatibility promise. Programs use package demux.
package bind
