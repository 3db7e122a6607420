// Package lookup holds what every search of the table shares: the record
// of a bound socket, and how a datagram ranks the records it meets.
//
// One Entry is one published state of a bound socket, with the intrusive
// chain nodes that link it into its storage's chains, and, for an
// unconnected SO_REUSEPORT socket, its Group. An Entry is immutable once
// published: a change to a socket's addressing (connect, a device)
// publishes a new Entry and retires the old one, so a reader that holds
// an Entry sees one consistent state. Only the chain links change after
// publication, and only under the lock of the chain they belong to.
// Readers take no lock: chains are published atomically, and a search
// that a move between chains may have spoiled, as a SeqCount tells, makes
// at most ReadTries attempts before it turns to a read no move can spoil.
//
// A candidate has the datagram's port, its address or a wildcard that
// reaches it, its source as remote if connected, and a compatible device.
// Exact-address candidates beat every wildcard one; within a tier the
// score is 2 for an IPv4 socket receiving IPv4 (else 1), +8 if connected,
// +4 if bound to a device; ties go to the most recently bound (Best). A
// winner in an SO_REUSEPORT group hands over to the member the flow hash
// picks (Receiver).
//
// Each storage searches its own structures with these (package grow for
// the default storage, package fixed for Linux's fixed tables), so that
// every storage and strategy gives the same answer.
//
// This is an implementation package of udpdemux, exported only so that the
// module's other packages can use it: its API may change in any release,
// with no compatibility promise. Programs use package demux.
package lookup
