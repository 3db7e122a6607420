// Package demux is the public API of udpdemux: a user-space UDP socket
// table with Linux's semantics.
//
// A Table holds bound sockets. Bind checks for conflicts (SO_REUSEADDR,
// SO_REUSEPORT groups, bound devices, IPv4/IPv6 dual stack) and chooses an
// ephemeral port for port 0; Connect sets a socket's peer; Close removes it;
// Lookup finds the socket that receives a datagram, without allocating,
// and without locks unless writers keep moving the sockets of its port
// (see Lookup).
//
// A Table keeps two indexes, as Linux has since 2.6.33: a primary index
// keyed by port and a secondary index keyed by (address, port), which grow
// and shrink with the sockets by default (Config.Slots selects Linux's
// fixed-size hash tables instead). Lookups and explicit-port bind checks use the secondary table when
// the port's primary chain is long (the hybrid rule), and the primary chain
// otherwise. Every strategy gives the same answer; only the cost differs.
//
// Seven details differ from Linux on purpose, so that no answer depends on
// the order of sockets in a chain, on which path found them or on a
// socket's history (numbered as in README and DESIGN.md):
//
//  1. A bind conflicts if any socket on the port conflicts; Linux stops at
//     the first compatible SO_REUSEPORT socket (a 6.18.44 build only at
//     one the new socket would share a group with).
//  2. A lookup returns the best-scoring socket even when an SO_REUSEPORT
//     socket comes first in the chain.
//  3. IPv6 SO_REUSEPORT sockets win ties like any other socket (the newest
//     wins); Linux puts them at the end of the chain.
//  4. A bind to 127.0.0.6 always conflicts with a dual-stack socket that
//     holds that address as its IPv4 placeholder (it connected to an IPv6
//     peer); Linux misses it when the port has more than 10 sockets.
//  5. A socket that bind(0) gave its port keeps it on Disconnect; Linux
//     unbinds it and binds a new one at the next send.
//  6. An SO_REUSEPORT group is every unconnected SO_REUSEPORT socket with
//     the same family, address, port, device and owner. Linux takes a
//     socket out of its group when it connects, disconnects from a
//     wildcard or changes device, and does not put it back.
//  7. Disconnect forgets an IPv6 socket's peer; Linux keeps its address,
//     and accepts IPv6 datagrams from that address alone.
//
// # Serving from kernel sockets
//
// The table holds no kernel sockets. Package demux/serve runs one on the
// host's UDP sockets: it reads datagrams from kernel sockets, looks each one
// up in a Table and hands it to the socket's handler.
//
// # Callbacks that panic
//
// The table calls the caller's code back: Config.OnPort, Config.IsLocal,
// Config.ZoneIndex and Config.Rand; a group's Selector, and the key
// function given to Rendezvous; the yield function of LookupMulticast;
// and the loop bodies of the iterators Multicast, Sockets, Ports and
// Members.All. The table does not recover a panic in any of them: it goes
// on to the caller of the method that called the callback, and it leaves
// the table consistent on its way. No lock stays held, Verify passes, Len
// and Stats count the sockets the table holds, and the next operation
// works, on the same port as on any other.
//
// A write that the panic interrupts before it took effect is undone: a
// Bind whose OnPort(port, true), IsLocal, ZoneIndex or Rand panics binds
// nothing, as if OnPort had vetoed it (so OnPort(port, false) does not
// follow, and the next bind on the port calls OnPort(port, true) again),
// and a Connect whose ZoneIndex panics leaves the socket as it was. A
// write that had taken effect is complete: a Close whose OnPort(port,
// false) panics has closed the socket, and the port is out of use.
// Lookups and iterations change nothing; a panic only cuts them short.
package demux
