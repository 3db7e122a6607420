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
// # Inside
//
// By default a Table's storage grows and shrinks with the sockets it holds
// (package grow). Each port that ever held a socket has a slot, in pages
// of 256 ports indexed directly by port number, holding the chain of the
// port's sockets, newest first. Two indexes, which resize while lookups
// run, hold the classes of sockets that any datagram scores alike: one
// keyed by (address, port, device) for unconnected sockets, and one keyed
// by 4-tuple for connected ones (package internal/grow's Map). Beside its slot, the page
// holds the record that the port's writers lock while it holds a socket.
// A lookup scans
// the port's chain while it holds at most Config.Threshold sockets, and
// otherwise probes the 4-tuple index (when the port's filter of peers says
// the source may be one), then the exact address's key and the wildcard's.
// A bind check scans the port's sockets, and past 64 of them (under the
// Hybrid strategy) reads the port's summary of their attributes. bind(0) picks among the free ports
// of an occupancy index (package bind).
//
// Config.Slots, a power of two from 256 to 65536, selects Linux's design
// instead (package fixed): a primary table keyed by port and a secondary
// table keyed by (address, port), fixed at that many slots, as Linux has
// since 2.6.33. Lookups and explicit-port bind checks use the secondary
// table when the port's primary chain is long (the hybrid rule), and the
// primary chain otherwise; Config.Ephemeral may then select Linux's
// bind(0) algorithms. Every storage and strategy gives the same answers; only the
// cost differs.
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
// The table calls the caller's code back: Config.OnPort, Config.OnAddr,
// Config.IsLocal, Config.ZoneIndex and Config.Rand; a group's Selector,
// and the key
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
// follow, and the next bind on the port calls OnPort(port, true) again);
// one whose OnAddr panics binds nothing either, and the OnPort(port, true)
// that preceded it, if any, is followed by OnPort(port, false); and a
// Connect whose ZoneIndex panics leaves the socket as it was. A write
// that had taken effect is complete: a Close whose OnPort(port, false)
// or OnAddr panics has closed the socket, and the port is out of use if
// that socket was its last (OnPort hears of it even when OnAddr
// panicked). Lookups and iterations change nothing; a panic only cuts them short.
package demux
