// Package difftest is the differential test harness of package demux: it
// runs one sequence of operations on the reference model (internal/model)
// and on a demux.Table, and compares every answer — bind and connect
// errors (by errno), the bind(0) port (legal for the model), the receiving
// socket of each lookup, the receivers of each multicast lookup, and the
// sockets' addresses — and calls the table's Verify after every write. A
// Generator makes random sequences that mostly hit live sockets; Shrink
// finds a short sequence that still fails.
//
// It is test support: only the module's tests import it.
package difftest
