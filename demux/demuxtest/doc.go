// Package demuxtest runs a demux.Table against the reference model of
// Linux's socket table (internal/model), for the module's tests: it runs
// one sequence of operations on both and compares every answer — bind and
// connect errors (by errno), the bind(0) port (legal for the model), the
// receiving socket of each lookup, the receivers of each multicast lookup,
// and the sockets' addresses — and calls the table's Verify after every
// write. A Generator makes random sequences that mostly hit live sockets;
// Shrink finds a short sequence that still fails. Configs is the one list
// of table configurations that the module's tests run on, the
// differential and the conformance tests among them; Storages, Strategies
// and Named take subsets of it.
//
// It is a subpackage that imports its parent, as net/http/httptest imports
// net/http, so that the reference model and the rest of the module's
// lower packages import nothing above them. It holds test support only:
// nothing in the library imports it, and its API follows the needs of
// demux's and the conformance test's tests rather than a compatibility
// promise.
package demuxtest
