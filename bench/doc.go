// Package bench holds udpdemux's go test benchmarks: lookups under the
// one-phase, two-phase and hybrid strategies on the shapes of the 2009
// netdev discussions, against gVisor's netstack and a Go map floor, and
// bind(0) by occupancy against gVisor and the Linux kernel. It is its own
// module, so that importers of the library never inherit gVisor or the
// plotting library; the runner that prints the tables and draws the plots
// is cmd/udpbench. The scenarios themselves live in package suite.
package bench
