// Package serve serves a demux.Table from real kernel UDP sockets: it opens
// one wildcard kernel socket per address family and port that the table
// uses, reads datagrams from them in batches, asks the table which socket
// receives each one, and hands it to a handler with that socket and its
// value. Replies leave from the address the datagram was sent to.
//
// It is a package of its own because it needs golang.org/x/net (for
// sendmmsg, the IP_PKTINFO / IPV6_PKTINFO socket options, and reads
// outside Linux; on Linux it calls recvmmsg itself) and does I/O, which
// the table and its packages must not: they are pure data
// structures, usable in a user-space network stack that has no kernel
// sockets at all.
//
// # Ports
//
// New makes the table and chains the adapter's port hook in front of the
// caller's: when the table's first socket on a port is about to be bound,
// the adapter opens the kernel sockets 0.0.0.0:port and [::]:port (IPv6
// only, so both can exist) and starts a reader for each, then calls the
// caller's Config.OnPort, if any. If either fails, the bind fails with that
// error (for example EADDRINUSE when another program on the host holds the
// port; bind(0) then fails too, and the caller may retry) and the kernel
// sockets are closed again. When the table's last socket on a port is
// closed, the kernel sockets of that port are closed, then the caller's
// hook is told.
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
// Options.PortUnreachable, from raw sockets (CAP_NET_RAW), rate-limited
// as Linux's defaults limit it. For multicast and broadcast Linux sends
// none (Stats.UnmatchedMulticast).
// Datagrams that the kernel dropped because a kernel socket's receive
// buffer was full are counted from SO_RXQ_OVFL (Stats.KernelDrops).
//
// Handlers run on the reader goroutines: one per kernel socket, so calls
// for datagrams of one port and family come one at a time, in arrival
// order, and calls for different ones run concurrently. A handler may use
// the table (bind, connect, close), since no lock is held while it runs.
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
