// Package conformance holds the kernel conformance test of udpdemux: random
// scenarios of binds, connects, closes and datagrams, run both against real
// Linux UDP sockets and against a demux.Table, which must agree on every bind
// result and on the receiver of every datagram.
//
// The package has no API; everything is in its tests. Run it with
//
//	go test ./conformance -run TestKernelConformance -v
//
// As root, it runs in a network namespace of its own, with extra addresses on
// lo and two veth pairs as more devices: one with addresses, and one whose
// ends have no IPv4 and no IPv6 address, so that connects through them find
// no source; otherwise on the host's loopback with fewer features. See conformance_linux_test.go for the knobs (seed, number of
// scenarios, replay of one scenario). TestKernelFound replays, as fixed
// scenarios, the random failures that were the test's own fault.
package conformance
