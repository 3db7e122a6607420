// Package ipv6 owns the address rules that cross the IPv4/IPv6 boundary,
// as Linux applies them to UDP sockets:
//
//   - A socket's family follows its local address: an IPv4 address makes
//     an IPv4 socket, any IPv6 address (v4-mapped included) an IPv6 one.
//   - An IPv6 socket bound to "::" without V6Only is dual-stack: it receives
//     IPv4 datagrams and conflicts with IPv4 binds on its port.
//   - A v4-mapped address (::ffff:a.b.c.d) stands for a.b.c.d, in bind
//     conflicts and in lookups; V6Only with a v4-mapped address is EINVAL.
//   - Binding an IPv6 socket to a specific, non-mapped address sets V6Only.
//   - A dual-stack socket that connects to an IPv6 peer keeps the IPv4
//     placeholder address 127.0.0.6 (LOOPBACK4_IPV6), which still overlaps
//     0.0.0.0 and 127.0.0.6 in bind conflicts.
//   - Link-local addresses (fe80::/10, ff02::/16) need an interface, from
//     the address's zone or from the socket's device; the socket then
//     behaves as bound to that device.
//   - An IPv6 socket that connects to a v4-mapped peer remembers that
//     IPv4 peer (Linux's inet_daddr) through later connects to IPv6 peers;
//     the placeholder fallback reads it (Local.Connected).
//
// The rules are stated on the fields of lookup.Entry (its family flags, V4
// and V6), which is what both the bind checks and the lookups read.
//
// This is an implementation package of udpdemux, exported only so that the
// module's other packages can use it: its API may change in any release,
// with no compatibility promise. Programs use package demux.
package ipv6
