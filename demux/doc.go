// Package demux is the public API of udpdemux: a user-space UDP socket
// table with Linux's semantics.
//
// A Table holds bound sockets. Bind checks for conflicts (SO_REUSEADDR,
// SO_REUSEPORT groups, bound devices, IPv4/IPv6 dual stack) and chooses an
// ephemeral port for port 0; Connect sets a socket's peer; Close removes it;
// Lookup finds the socket that receives a datagram, without locks and
// without allocating.
//
// Inside, a Table keeps two hash tables, as Linux has since 2.6.33: a
// primary table keyed by port and a secondary table keyed by (address,
// port). Lookups and explicit-port bind checks use the secondary table when
// the port's primary chain is long (the hybrid rule), and the primary chain
// otherwise. Every strategy gives the same answer; only the cost differs.
//
// Three details differ from Linux on purpose, so that no answer depends on
// the order of sockets in a chain: a bind conflicts if any socket on the
// port conflicts (Linux stops at the first compatible SO_REUSEPORT socket),
// a lookup returns the best-scoring socket even when an SO_REUSEPORT socket
// comes first in the chain, and IPv6 SO_REUSEPORT sockets win ties like any
// other (the newest wins).
package demux
