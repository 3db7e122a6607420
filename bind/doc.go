// Package bind decides whether a socket may bind: the conflict rule between
// two sockets on one port, the explicit-port check that applies it to every
// socket that could conflict, and the choice of an ephemeral port for
// bind(0).
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
