// Package serve serves a demux.Table from real kernel UDP sockets: it opens
// one wildcard kernel socket per address family and port that the table
// uses (or, with Options.PerAddress, one per address), reads datagrams
// from them in batches, asks the table which socket receives each one,
// and hands it to a handler with that socket and its value. Replies leave
// from the address the datagram was sent to.
//
// It is a package of its own because it does I/O and needs
// golang.org/x/net, which the table and its packages must not: they are
// pure data structures, usable in a user-space network stack that has no
// kernel sockets at all.
//
// # Ports
//
// New makes the table and chains the adapter's port hook in front of the
// caller's: when the table's first socket on a port is about to be bound,
// the adapter opens the kernel sockets 0.0.0.0:port and [::]:port (IPv6
// only, so both can exist) and starts a reader for each, then calls the
// caller's Config.OnPort, if any. If either fails, the bind fails with that
// error (for example EADDRINUSE when another program on the host holds the
// port, as below; bind(0) then chooses another port, up to 8 in all) and
// the kernel sockets are closed again. When the table's last socket on a
// port is closed, the kernel sockets of that port are closed (see
// Lifecycle for when), then the caller's hook is told.
//
// Sharing a port with other programs: on Linux the kernel sockets bind
// with SO_REUSEADDR, which they clear once bound. So a table bind on a
// port where another program already holds an address with SO_REUSEADDR
// works, as two programs would share it on Linux: beside a socket on
// 127.0.0.53:53 (where systemd-resolved listens) with SO_REUSEADDR, a
// table socket on 127.0.0.2:53 binds and receives,
// and the other program still receives what is sent to its own address
// (Linux gives it to the more specific socket; TestShareWithOtherProgram
// runs the other program in a second process). What the wildcard kernel
// sockets cannot do as Linux does (Options.PerAddress can, see below):
//   - Another program that holds an address of the port without
//     SO_REUSEADDR blocks the whole port for the table (EADDRINUSE), where
//     Linux would let a socket on another specific address bind.
//   - Once the server serves a port, no other socket binds it on the host,
//     not even with SO_REUSEADDR on both sides or on another specific
//     address, where Linux would let it bind beside the table's sockets.
//     That is what keeps a second server (in this process or another)
//     from binding the same port and taking its datagrams; with
//     Options.Readers above 1 it holds only for sockets without
//     SO_REUSEPORT, since the port's kernel sockets are a group that
//     another socket of the same user with SO_REUSEPORT may join.
//   - The table does not see the other program's socket, so it does not
//     check its own binds against it: when the port first comes into use
//     beside such a program, a wildcard table socket without ReuseAddr
//     binds, where Linux would refuse it; and a table socket on the very
//     address the other program holds binds but receives nothing, since
//     the kernel gives those datagrams to the other program's socket.
//
// With Options.PerAddress the kernel sockets follow the addresses of the
// table's sockets instead (Config.OnAddr tells the server of each bind
// and close; Options.PerAddress says which kernel sockets that opens and
// what the host's other programs can then do): beside a socket on
// 127.0.0.53 without SO_REUSEADDR, a table socket on 127.0.0.2 binds and
// receives, and binds that Linux would refuse (127.0.0.53 itself, a
// wildcard) fail with the kernel's EADDRINUSE and leave the table as it
// was; a program that binds another address of the port after the server
// does so (TestPerAddressSharesPort). The server's own kernel sockets on
// one port coexist, wildcard and specific, by setting SO_REUSEADDR again
// on each other for the moment of a bind. A multicast or broadcast
// datagram reaches the kernel socket of each address it matches (the
// wildcard's and the group's or broadcast address's); each delivers it
// only to the table sockets bound to its own address, so that every
// table socket receives it once. Replies and a Conn's datagrams leave
// from the kernel socket of the table socket's address. JoinGroup joins
// on the kernel socket of the group's address, else the family's
// wildcard, else another of the port's, and the membership ends when
// that kernel socket closes. An address's kernel socket closes as a
// port's does without PerAddress (see Lifecycle): if its reader is in a
// batch, when the batch's replies are sent. A datagram that reaches it
// in between, sent to that address after its last table socket closed,
// is lost with it, where Linux would give it to a wildcard socket of the
// table (without PerAddress only the port's last close has this window,
// and no socket is left to receive).
//
// Outside Linux the kernel sockets set no SO_REUSEADDR: the port must be
// free.
//
// As Linux does for a socket without IP_FREEBIND, a bind to an address
// that the host does not have fails with EADDRNOTAVAIL: unless the caller
// sets Config.IsLocal, New sets it from the host's interface addresses
// (every address of the loopback prefix, 127.0.0.0/8 on lo; the directed
// broadcast addresses of interfaces that are up; link-local and loopback
// IPv6 addresses on their own interfaces only, when the socket has a
// device). It reads them again when a bind misses, at most every 10 ms,
// and when its copy is a second old, so an address added to an interface
// binds at once, and one removed stops binding within a second.
// Options.FreeBind turns the check off.
//
// # Delivery
//
// A unicast datagram goes to the socket that Table.Lookup picks for its
// source, destination (from the control message) and arrival interface. A
// multicast or broadcast datagram goes to every socket that
// Table.LookupMulticast yields. The kernel sockets only see multicast
// groups that some socket on the host joined (Server.JoinGroup joins one on
// a port's kernel socket); among the table's sockets, each receiving socket
// gets every such datagram, as Linux's sockets do with IP_MULTICAST_ALL on
// (its default). A handler that models per-socket memberships filters by
// Request.Multicast and its own records.
//
// A datagram that no socket receives is counted (Stats.Unmatched) and
// dropped. Linux answers a unicast one with an ICMP port unreachable (and
// counts it in UDP NoPorts); the server does so with
// Options.PortUnreachable. For multicast and broadcast Linux sends none
// (Stats.UnmatchedMulticast). Datagrams that the kernel dropped because a
// kernel socket's receive buffer was full are counted in
// Stats.KernelDrops.
//
// Handlers run on the reader goroutines, one per kernel socket, which
// handle each batch in arrival order. Calls for one socket's datagrams
// come one at a time, in arrival order, and its replies leave in that
// order. A slow handler holds up only its own socket: one watcher
// goroutine per server looks at the readers that are handling a batch
// every quarter of a millisecond (and only while some are), and a reader
// that it finds in the same handler call for a unicast datagram at two
// looks in a row hands the rest of its batch and the kernel socket to a
// new reader goroutine, which sets the slow socket's datagrams aside for
// the slow call's goroutine to handle after it, and serves the other
// sockets meanwhile. So another socket's datagram waits at most about
// half a millisecond, plus the scheduling of the new reader, for a slow
// call on its port (the runner's slow-handler scenario measures what it
// adds). Calls for different sockets of one port and family may
// therefore run concurrently: what is serial is the calls of one socket.
// At most 32 calls of a kernel socket's are handed off at a time, each
// holding a goroutine and a batch's buffers until it returns; past that,
// and for a slow call for a multicast datagram, which is not handed off,
// the port's reader waits for the call. Calls for different ports, or
// families, run concurrently. A handler may use the table (bind, connect,
// close), since no lock is held while it runs.
//
// One reader per port and family uses one core at a time for that port.
// Options.Readers opens more, an SO_REUSEPORT group that keeps each flow
// on one reader: a flow's datagrams are still handled in the order they
// arrived, while different flows' are handled on several cores. What
// changes: one table socket's calls for datagrams of different flows may
// run at once, on different readers, and the order between flows is not
// kept. Multicast and broadcast datagrams, of which the kernel gives every
// socket of the group a copy, are delivered by the family's first reader
// only (TestReadersOneCopyOfBroadcast checks that the running kernel
// copies IPv4 broadcasts to each socket; IPv6 multicast takes the same
// path in Linux's UDP code, and is not tested here).
//
// # Lifecycle
//
// A reader reads a batch of datagrams, looks them all up, then calls the
// handler (or queues for the Conn) for each in arrival order, then sends
// the batch's replies. From that follow these rules.
//
// When a reply is sent: Request.Reply copies the reply into the batch's
// queue; the queue is sent (sendmmsg) when the batch's last handler has
// returned, or earlier when it holds Options.Batch replies or when a slow
// call is handed off. A reply
// queued before a close is sent: if a handler closes the port's last
// socket, the port's kernel sockets close only once the batch's replies
// have left (and a bind on the port before then keeps them open). Every
// handler call gets a Request of its own; once the call has returned,
// Reply sends nothing and returns ErrRequestDone, from any goroutine,
// so a Request kept too long cannot answer another client.
//
// What a close does to queued datagrams: a socket that is closed (through
// the table, its handle or its Conn) receives nothing afterwards, not even
// the datagrams of the batch being handled that were looked up before
// the close: those are counted in Stats.Unmatched, as Linux discards a
// closed socket's queue. A Conn whose socket closed drops the datagrams
// in its queue: its reads fail with net.ErrClosed. When a port goes out
// of use, the datagrams its kernel sockets still hold are lost with them.
// Server.Stop handles every datagram already read, and sends its replies.
//
// What a panic does: the panic of a caller's Config.OnPort that is told
// of a new port closes the kernel sockets just opened for it and ends
// their readers before it reaches the caller of Bind, which binds
// nothing, as after a veto; when OnPort is told of a port going out of
// use, the kernel sockets are already closed. No lock of the server or of
// the table stays held (the table's rules are in the demux package's
// "Callbacks that panic"). A panic in a handler is not recovered: like
// any goroutine's, it ends the program.
//
// What a port costs: each port in use has one kernel socket and one
// reader goroutine per family (two, or one with Options.IPv4Only), times
// Options.Readers. The readers' buffers are the server's, shared by all
// its ports: a reader takes a batch (Options.Batch buffers of
// Options.MaxDatagram bytes for reads and as many for replies) when its
// kernel socket becomes readable, and gives it back when a read finds
// nothing more queued, so an idle port holds none. GOMAXPROCS batches
// stay allocated once made; those that more readers busy at once need
// are left to the garbage collector after their burst (a sync.Pool). So
// an idle port costs mostly its readers' goroutine stacks (as deep as
// their handlers went) and its kernel sockets; the benchmark runner's
// port-cost scenario measures it (bench/RESULTS.md). An epoll loop of the
// server's own for idle sockets could replace the parked readers, at the
// price of re-arming the socket (epoll_ctl), waking the loop and
// starting a goroutine whenever an idle socket becomes readable. Handler
// calls allocate their Requests in slabs of Options.Batch, and a slow
// call's hand-off takes a batch for the new reader.
//
// # Conns
//
// A socket can have a Conn instead of the handler: a net.PacketConn that
// behaves as a *net.UDPConn bound to the socket's address, for services
// written against package net (Server.ListenPacket binds a socket and
// returns its Conn; Server.SocketConn wraps a socket already bound).
// Every datagram that the table gives the socket goes to its Conn and to
// nothing else; a Conn's writes leave through the port's kernel socket
// from the socket's address, or on a wildcard socket from the address
// the peer wrote to. Conn lists what it offers of *net.UDPConn's fast
// paths and what it cannot offer on a kernel socket that it shares.
//
// The datagrams' payloads reach the table's lookups too
// (demux.Datagram.Payload), so that an SO_REUSEPORT group's selector can
// steer by them, as an eBPF reuseport program does: a QUIC server by
// connection ID.
package serve
