//go:build linux

package conformance

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// The runner's state: the tables under test, the open sockets on every
// side, the trace and the first failure. Its steps are in
// steps_linux_test.go.

// tableUT is one table under test: every op runs on a table of each
// configuration of demuxtest.Configs.
type tableUT struct {
	name string
	t    *demux.Table[int]
}

// rsock is an open socket of a scenario, on every side.
type rsock struct {
	id        int
	spec      bindSpec
	v6only    bool // effective: a specific IPv6 bind sets it
	fd        int
	ts        []*demux.Socket[int] // one per table
	connected bool
	remote    netip.AddrPort
	local     netip.AddrPort // getsockname
	dev       int            // the device it is bound to now: the bind's, SO_BINDTODEVICE's, 0 after a disconnect
	// disconnected reports a socket that disconnected and has not
	// connected since; oldPeer is the peer it had.
	disconnected bool
	oldPeer      netip.AddrPort
}

type failure struct {
	step int    // index of the op that failed
	kind string // class, for grouping and for shrinking
	msg  string
}

// runner executes ops on the kernel, the model and the tables, and compares.
// It runs on the env thread.
type runner struct {
	e          *env
	excuse     feature // features whose differences are deliberate
	tables     []tableUT
	m          *kmodel
	socks      map[int]*rsock
	seq        uint64
	st         *stats
	trace      []string
	fail       *failure
	long       bool
	verifyEach bool
	outcome    string   // the kernel's answer to the current op
	outcomes   []string // the kernel's answer to every op run
}

func newRunner(e *env, excuse feature, salt uint64) (*runner, error) {
	r := &runner{e: e, excuse: excuse, m: newModel(), socks: map[int]*rsock{}, st: newStats(), seq: salt << 32}
	for _, c := range demuxtest.Configs() {
		t, err := demux.New[int](c.Table)
		if err != nil {
			return nil, fmt.Errorf("demux.New(%s): %w", c.Name, err)
		}
		r.tables = append(r.tables, tableUT{c.Name, t})
	}
	return r, nil
}

// cleanup closes every kernel socket (the tables are dropped).
func (r *runner) cleanup() {
	for _, s := range r.socks {
		syscall.Close(s.fd)
	}
	r.socks = nil
}

func (r *runner) failf(step int, kind, format string, args ...any) {
	if r.fail == nil {
		r.fail = &failure{step: step, kind: kind, msg: fmt.Sprintf(format, args...)}
	}
}

func (r *runner) tracef(format string, args ...any) {
	r.trace = append(r.trace, fmt.Sprintf(format, args...))
}

func (r *runner) devName(ifindex int) string {
	for _, d := range r.e.devs {
		if d.ifindex == ifindex {
			return d.name
		}
	}
	return fmt.Sprint(ifindex)
}

func (r *runner) specString(b bindSpec) string {
	var s strings.Builder
	s.WriteString(netip.AddrPortFrom(b.addr, b.port).String())
	if b.reuseAddr {
		s.WriteString(" reuseaddr")
	}
	if b.reusePort {
		s.WriteString(" reuseport")
	}
	if b.owner != r.e.uid {
		fmt.Fprintf(&s, " owner=%d", b.owner)
	}
	if b.dev != 0 {
		fmt.Fprintf(&s, " dev=%s", r.devName(b.dev))
	}
	if b.v6only {
		s.WriteString(" v6only")
	}
	return s.String()
}

func (r *runner) sockName(id int) string {
	if id < 0 {
		return "none"
	}
	return fmt.Sprintf("s%d", id)
}

func setName(ids []int) string {
	switch len(ids) {
	case 0:
		return "none"
	case 1:
		return fmt.Sprintf("s%d", ids[0])
	}
	var p []string
	for _, id := range ids {
		p = append(p, fmt.Sprintf("s%d", id))
	}
	return "group{" + strings.Join(p, ",") + "}"
}

// exec runs one op; false when the scenario must stop.
func (r *runner) exec(step int, o op) bool {
	r.st.ops++
	r.outcome = ""
	defer func() { r.outcomes = append(r.outcomes, r.outcome) }()
	switch o.kind {
	case opBind:
		r.doBind(step, o)
	case opConnect:
		r.doConnect(step, o)
	case opClose:
		r.doClose(step, o)
	case opSend:
		r.doSend(step, o)
	case opDisconnect:
		r.doDisconnect(step, o)
	case opSetDev:
		r.doSetDev(step, o)
	}
	if r.verifyEach {
		r.verify(step)
	}
	return r.fail == nil
}

// verify runs the tables' invariant check. It costs milliseconds (it looks
// at every port), so scenarios run it at their end, and replays after every
// op.
func (r *runner) verify(step int) {
	if r.fail != nil {
		return
	}
	for _, t := range r.tables {
		if err := t.t.Verify(); err != nil {
			r.failf(step, "verify", "table %s: Verify: %v", t.name, err)
			return
		}
	}
}

func (r *runner) sortedSocks() []*rsock {
	out := make([]*rsock, 0, len(r.socks))
	for _, s := range r.socks {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *rsock) int { return a.id - b.id })
	return out
}
