// Package grow is udpdemux's default storage: tables that grow and shrink
// with the sockets they hold, so that no shape a service builds makes a
// lookup or a bind slow.
//
// # Structures
//
//   - pages: port → port slot, indexed directly, in pages of 256 ports made
//     when a port of the page is first bound. A slot holds what lookups
//     read of the port: every socket on it in a chain (newest first) with
//     the port's move sequence count, and the filters of its connected
//     sockets' peers and of its sockets' devices.
//   - port records, for writers, one in the page of each port that holds
//     a socket, beside the slots: the port's lock, its SO_REUSEPORT groups
//     and the summary that bind checks read.
//   - addrs: (address key, port) → the unconnected sockets bound there.
//   - conns: (local key, port, remote address, remote port) → the connected
//     sockets with that 4-tuple: Linux 6.13's 4-tuple hash, searched first.
//
// An unconnected entry bound to a device is keyed in addrs by its device
// too, so that sockets that differ only by device are keys, not classes
// of one key; a per-port filter of those devices tells a lookup whether
// the datagram's interface has any.
//
// addrs and conns map a key to its classes: sockets that any datagram
// scores alike (same family flags, addresses, device, peer). A class is a
// chain of entries through their secondary links, newest first (for the
// 4-tuple table, most recently first-connected first), and the index holds
// the head of each class. A lookup scores one head per class, never the
// members behind it, so a thousand SO_REUSEADDR sockets on one address cost
// what one does, and an SO_REUSEPORT group of any size costs one pick.
// The two maps resize while lookups run: addrs and conns are Maps (index.go),
// which keep each key's first head
// inline in a cache line, so that a lookup reads that line and then the
// entry it scores.
//
// # Lookups
//
// A lookup finds the port's slot. With at most Threshold sockets on the
// port it scans the port's chain (one probe; Linux's primary-table path).
// Otherwise it probes the 4-tuple table if the port's peer filter says a
// connected socket may have the datagram's source as its peer (an
// exact-address match there beats every unconnected socket), then the
// exact-address key and, unless an exact-address socket matched, the
// wildcard key. A connect moves a socket from addrs to conns: the writer
// publishes it in its new place before removing it from the old one,
// inside the port's sequence count, and a lookup that searched more than
// one index re-runs if the count moved.
//
// # Writes and locks
//
// Every write concerns one port and holds that port record's lock, which
// serializes all changes to the port's sockets, classes, groups and
// summaries. Index lines have their own locks, taken inside the port lock
// one at a time, and never the other way round; a resize takes its map's
// resize lock with no line lock held, then each old line's in turn. A
// record found dead after locking (its last socket left) is retried.
// Every one of these locks is a lockorder.Mutex, taken through the
// write's lockorder.Guard, which the record carries while it is held
// (Port.ord): with checking on, the Guard checks that order.
//
// # Bind checks
//
// A bind to an explicit port on a port that holds a few sockets scans
// them; once the port has held more than 64 (with the hybrid strategy),
// it checks conflicts against the port's bind.Summary, not its sockets,
// which answers exactly as a scan of every socket on the port would.
package grow
