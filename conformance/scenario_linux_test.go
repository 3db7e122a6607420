//go:build linux

package conformance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/udpdemux/udpdemux/demux"
)

// A scenario is a list of ops. Sockets are named by the index of the bind
// that made them (s0, s1, ...); an op on a socket that is not open (its bind
// failed, or it was closed) does nothing, so any sub-list of a scenario is a
// scenario too, which is what shrinking needs.

type opKind uint8

const (
	opBind opKind = iota
	opConnect
	opClose
	opSend
)

type bindSpec struct {
	addr      netip.Addr // IPv4 in 4-byte form; IPv6 (v4-mapped included) in 16-byte form
	port      uint16
	reuseAddr bool
	reusePort bool
	owner     uint32
	dev       int
	v6only    bool
}

type op struct {
	kind opKind
	id   int            // bind: the new socket; connect, close: the socket
	bind bindSpec       // bind
	peer int            // connect: the remote; send: the source
	dst  netip.AddrPort // send
}

// tableUT is one table under test.
type tableUT struct {
	name string
	t    *demux.Table[int]
}

// tableConfigs are the tables every op runs on: each strategy, and a small
// table with threshold 1 so that the hybrid strategy takes its secondary
// path on short chains.
var tableConfigs = []struct {
	name string
	cfg  demux.Config
}{
	{"hybrid", demux.Config{}},
	{"one-phase", demux.Config{Slots: 256, Strategy: demux.OnePhase}},
	{"two-phase", demux.Config{Slots: 256, Strategy: demux.TwoPhase}},
	{"hybrid/threshold=1", demux.Config{Slots: 256, Threshold: 1}},
}

// rsock is an open socket of a scenario, on every side.
type rsock struct {
	id        int
	spec      bindSpec
	v6only    bool // effective: a specific IPv6 bind sets it
	fd        int
	ts        []*demux.Socket[int] // one per table
	ms        *msock
	connected bool
	remote    netip.AddrPort
	local     netip.AddrPort // getsockname
}

type failure struct {
	step int    // index of the op that failed
	kind string // class, for grouping and for shrinking
	msg  string
}

type stats struct {
	scenarios, ops           int
	binds                    map[string]int // kernel result -> count
	envSkips                 int            // binds the kernel refused for the environment (EADDRNOTAVAIL)
	connects                 int
	connectFails             map[string]int
	closes                   int
	sends, delivered, groups int // datagrams; delivered; delivered to a group of 2 or more
	deliberate               map[string]int
	matters                  map[string]int // steps whose kernel answer depends on a feature
	modelMisses              int            // ordinary steps where the model (not the table) was wrong
	cpuResets                int
	longChains               int // scenarios where a port had more than 10 sockets
}

func newStats() *stats {
	return &stats{binds: map[string]int{}, connectFails: map[string]int{}, deliberate: map[string]int{}, matters: map[string]int{}}
}

func (s *stats) add(o *stats) {
	s.scenarios += o.scenarios
	s.ops += o.ops
	s.envSkips += o.envSkips
	s.connects += o.connects
	s.closes += o.closes
	s.sends += o.sends
	s.delivered += o.delivered
	s.groups += o.groups
	s.modelMisses += o.modelMisses
	s.cpuResets += o.cpuResets
	s.longChains += o.longChains
	for k, v := range o.binds {
		s.binds[k] += v
	}
	for k, v := range o.connectFails {
		s.connectFails[k] += v
	}
	for k, v := range o.deliberate {
		s.deliberate[k] += v
	}
	for k, v := range o.matters {
		s.matters[k] += v
	}
}

func (s *stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d scenarios, %d ops: binds %v (plus %d the kernel refused for the environment, not compared); ", s.scenarios, s.ops, sortedMap(s.binds), s.envSkips)
	fmt.Fprintf(&b, "%d connects (kernel refused %v); %d closes; %d datagrams, %d delivered, %d to a ReusePort group; ",
		s.connects, sortedMap(s.connectFails), s.closes, s.sends, s.delivered, s.groups)
	fmt.Fprintf(&b, "deliberate-difference steps (table checked against udpdemux's rule, kernel against the model) %v; ", sortedMap(s.deliberate))
	fmt.Fprintf(&b, "steps whose kernel answer depends on each modelled feature %v; ", sortedMap(s.matters))
	fmt.Fprintf(&b, "%d scenarios with a chain over 10; %d SO_INCOMING_CPU resets; %d ordinary steps where the kernel model was wrong", s.longChains, s.cpuResets, s.modelMisses)
	return b.String()
}

func sortedMap(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// runner executes ops on the kernel, the model and the tables, and compares.
// It runs on the env thread.
type runner struct {
	e          *env
	excuse     feature // features whose differences are deliberate
	tables     []tableUT
	m          *model
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
	for _, c := range tableConfigs {
		t, err := demux.New[int](c.cfg)
		if err != nil {
			return nil, fmt.Errorf("demux.New(%s): %w", c.name, err)
		}
		r.tables = append(r.tables, tableUT{c.name, t})
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

func errnoString(e syscall.Errno) string {
	switch e {
	case 0:
		return "ok"
	case syscall.EADDRINUSE:
		return "EADDRINUSE"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EADDRNOTAVAIL:
		return "EADDRNOTAVAIL"
	case syscall.EAFNOSUPPORT:
		return "EAFNOSUPPORT"
	case syscall.ENETUNREACH:
		return "ENETUNREACH"
	case syscall.EBADF:
		return "EBADF"
	case errUnknown:
		return "non-errno error"
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}

const errUnknown = syscall.Errno(0xfffff)

// errnoOf maps a table error to its errno.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	for _, e := range []syscall.Errno{syscall.EADDRINUSE, syscall.EINVAL, syscall.EADDRNOTAVAIL, syscall.EAFNOSUPPORT, syscall.EBADF} {
		if errors.Is(err, e) {
			return e
		}
	}
	return errUnknown
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

// kernelBind makes and binds a kernel socket.
func (r *runner) kernelBind(b bindSpec) (int, syscall.Errno, error) {
	fam6 := b.addr.Is6()
	fd, err := socket(fam6, b.owner)
	if err != nil {
		return -1, 0, err
	}
	set := func(level, opt, v int) {
		if err == nil {
			err = syscall.SetsockoptInt(fd, level, opt, v)
		}
	}
	if b.reuseAddr {
		set(syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}
	if b.reusePort {
		set(syscall.SOL_SOCKET, soReusePort, 1)
	}
	if fam6 {
		v := 0
		if b.v6only {
			v = 1
		}
		set(syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, v)
	}
	if b.dev != 0 {
		set(syscall.SOL_SOCKET, soBindToIfindex, b.dev)
	}
	if err != nil {
		syscall.Close(fd)
		return -1, 0, fmt.Errorf("setsockopt: %w", err)
	}
	if err := syscall.Bind(fd, sockaddr(netip.AddrPortFrom(b.addr, b.port))); err != nil {
		syscall.Close(fd)
		var en syscall.Errno
		if errors.As(err, &en) {
			return -1, en, nil
		}
		return -1, 0, err
	}
	return fd, 0, nil
}

func (r *runner) doBind(step int, o op) {
	b := o.bind
	fd, kerr, err := r.kernelBind(b)
	line := fmt.Sprintf("s%d = bind %s", o.id, r.specString(b))
	r.outcome = errnoString(kerr)
	if err != nil {
		r.failf(step, "env", "%s: %v", line, err)
		return
	}
	if kerr == syscall.EADDRNOTAVAIL || kerr == syscall.ENODEV {
		// The address is not usable with that device here: a question of
		// the host's addresses, which the table does not know.
		r.st.envSkips++
		r.tracef("%s -> kernel %s (environment; not asked of the table)", line, errnoString(kerr))
		return
	}
	ms, pre := prepare(o.id, b)
	kModel, dModel := pre, pre
	var kinds feature
	if pre == 0 {
		kModel = r.m.bindResult(ms, featAll)
		dModel = r.m.bindResult(ms, featAll&^r.excuse)
		for _, f := range featureNames {
			if r.m.bindResult(ms, featAll&^f.f) != kModel {
				r.st.matters["bind/"+f.name]++
			}
		}
		if kModel != dModel {
			for _, f := range featureNames {
				if r.excuse&f.f != 0 && r.m.bindResult(ms, featAll&^f.f) != kModel {
					kinds |= f.f
				}
			}
		}
	}
	opts := demux.Options{Addr: b.addr, Port: b.port, ReuseAddr: b.reuseAddr, ReusePort: b.reusePort,
		Owner: b.owner, Device: b.dev, V6Only: b.v6only}
	terr := make([]syscall.Errno, len(r.tables))
	tsocks := make([]*demux.Socket[int], len(r.tables))
	var tmsgs []string
	for i, t := range r.tables {
		s, err := t.t.Bind(opts, o.id)
		terr[i], tsocks[i] = errnoOf(err), s
		if err != nil {
			tmsgs = append(tmsgs, fmt.Sprintf("%s: %v", t.name, err))
		}
	}
	tableSays := func() string {
		var p []string
		for i, t := range r.tables {
			p = append(p, fmt.Sprintf("%s %s", t.name, errnoString(terr[i])))
		}
		return strings.Join(p, ", ")
	}
	keep := kerr == 0 // whether the socket stays open (on both sides)
	if kModel == dModel {
		r.tracef("%s -> %s", line, errnoString(kerr))
		if kerr != kModel {
			r.st.modelMisses++
			r.tracef("    (model said %s)", errnoString(kModel))
		}
		for i := range r.tables {
			if terr[i] != kerr {
				var expl feature
				if pre == 0 {
					for _, f := range featureNames {
						if r.excuse&f.f == 0 && r.m.bindResult(ms, featAll&^(r.excuse|f.f)) == terr[i] {
							expl |= f.f
						}
					}
				}
				r.failf(step, fmt.Sprintf("bind: kernel %s, table %s%s", errnoString(kerr), errnoString(terr[i]), explained(expl)),
					"%s: kernel %s; table: %s (%s); model of the kernel: %s%s", line, errnoString(kerr), tableSays(), strings.Join(tmsgs, "; "), errnoString(kModel), explained(expl))
				break
			}
		}
	} else {
		r.st.deliberate["bind/"+kindName(kinds)]++
		r.tracef("%s -> kernel %s, table %s [deliberate difference %s]", line, errnoString(kerr), errnoString(dModel), kindName(kinds))
		for i := range r.tables {
			if terr[i] != dModel {
				var expl feature
				for _, f := range featureNames {
					if r.excuse&f.f == 0 && r.m.bindResult(ms, featAll&^(r.excuse|f.f)) == terr[i] {
						expl |= f.f
					}
				}
				r.failf(step, fmt.Sprintf("bind (deliberate %s): rule %s, table %s%s", kindName(kinds), errnoString(dModel), errnoString(terr[i]), explained(expl)),
					"%s: deliberate difference %s; udpdemux's rule says %s (kernel %s); table: %s (%s)%s", line, kindName(kinds), errnoString(dModel), errnoString(kerr), tableSays(), strings.Join(tmsgs, "; "), explained(expl))
				break
			}
		}
		if r.fail == nil && kerr != kModel {
			r.failf(step, "bind: kernel differs from the model on a deliberate step",
				"%s: the model predicted kernel %s (deliberate difference %s) but the kernel said %s: the detection is wrong here", line, errnoString(kModel), kindName(kinds), errnoString(kerr))
		}
		keep = kerr == 0 && dModel == 0
	}
	r.st.binds[errnoString(kerr)]++
	if r.fail != nil {
		if kerr == 0 {
			syscall.Close(fd)
		}
		return
	}
	if !keep {
		// Bring both sides to the same state: the bind failed.
		if kerr == 0 {
			syscall.Close(fd)
		}
		for i, t := range r.tables {
			if tsocks[i] != nil {
				t.t.Close(tsocks[i])
			}
		}
		return
	}
	r.m.insert(ms)
	v6only := b.v6only || (b.addr.Is6() && b.addr != any6 && !b.addr.Is4In6())
	r.socks[o.id] = &rsock{id: o.id, spec: b, v6only: v6only, fd: fd, ts: tsocks, ms: ms, local: sockname(fd)}
	if n := len(r.m.primary(b.port, featAll)); n > 10 {
		r.long = true
	}
}

// remoteFor is the address a socket connects to, to reach peer p.
func remoteFor(s *rsock, p peer) netip.AddrPort {
	if s.spec.addr.Is6() && p.addr.Addr().Is4() {
		return netip.AddrPortFrom(netip.AddrFrom16(p.addr.Addr().As16()), p.addr.Port())
	}
	return p.addr
}

func (r *runner) doConnect(step int, o op) {
	s := r.socks[o.id]
	if s == nil {
		r.tracef("connect s%d: not open", o.id)
		return
	}
	remote := remoteFor(s, r.e.peers[o.peer])
	if r.excuse&skipConnect46 != 0 && s.connected && s.local.Addr().Is6() && !s.local.Addr().Is4In6() && remote.Addr().Is4In6() {
		r.tracef("connect s%d %v: skipped (connect46)", o.id, remote)
		return
	}
	if err := syscall.Connect(s.fd, sockaddr(remote)); err != nil {
		var en syscall.Errno
		errors.As(err, &en)
		r.st.connectFails[errnoString(en)]++
		r.outcome = errnoString(en)
		r.tracef("connect s%d %v -> kernel %s (a routing answer; not asked of the table)", o.id, remote, errnoString(en))
		return
	}
	r.st.connects++
	local := sockname(s.fd)
	r.outcome = "local " + local.Addr().String()
	r.m.connect(s.ms, remote, local.Addr())
	line := fmt.Sprintf("connect s%d %v (kernel: ok, local %v)", o.id, remote, local)
	r.tracef("%s", line)
	for i, t := range r.tables {
		if err := t.t.Connect(s.ts[i], remote, local.Addr()); err != nil {
			r.failf(step, "connect: kernel ok, table error", "%s: table %s: Connect(%v, %v): %v", line, t.name, remote, local.Addr(), err)
			return
		}
	}
	s.connected, s.remote, s.local = true, remote, local
}

func (r *runner) doClose(step int, o op) {
	s := r.socks[o.id]
	if s == nil {
		r.tracef("close s%d: not open", o.id)
		return
	}
	r.st.closes++
	syscall.Close(s.fd)
	r.m.close(s.ms)
	delete(r.socks, o.id)
	r.tracef("close s%d", o.id)
	for i, t := range r.tables {
		if err := t.t.Close(s.ts[i]); err != nil {
			r.failf(step, "close: table error", "close s%d: table %s: %v", o.id, t.name, err)
			return
		}
	}
}

// tableGroup is the set the table chose from when it returned socket id:
// its SO_REUSEPORT group (unconnected ReusePort sockets with the same
// address, port, device, family, V6Only and owner), or the socket alone.
func (r *runner) tableGroup(id int) []int {
	s := r.socks[id]
	if s == nil {
		return nil
	}
	if !s.spec.reusePort || s.connected {
		return []int{id}
	}
	var out []int
	for _, x := range r.socks {
		if x.spec.reusePort && !x.connected && x.spec.addr == s.spec.addr && x.spec.port == s.spec.port &&
			x.spec.dev == s.spec.dev && x.v6only == s.v6only && x.spec.owner == s.spec.owner {
			out = append(out, x.id)
		}
	}
	slices.Sort(out)
	return out
}

func (r *runner) doSend(step int, o op) {
	p := r.e.peers[o.peer]
	r.seq++
	payload := r.seq
	r.st.sends++
	if err := r.e.send(p.fd, o.dst, payload); err != nil {
		r.failf(step, "env", "send %v -> %v: %v", p.addr, o.dst, err)
		return
	}
	recv := -1
	for _, s := range r.sortedSocks() {
		for {
			v, ok := recvPayload(s.fd)
			if !ok {
				break
			}
			if v != payload {
				r.failf(step, "env", "s%d received a stale datagram %#x (want %#x)", s.id, v, payload)
				return
			}
			if recv >= 0 {
				r.failf(step, "env", "datagram %v -> %v received by s%d and s%d", p.addr, o.dst, recv, s.id)
				return
			}
			recv = s.id
			// Linux adds 1 to the score of a socket whose last datagram
			// was processed on the current CPU (sk_incoming_cpu; 6.18
			// updates it for connected sockets only). Undo it, so that
			// scores are the documented ones.
			if c, err := syscall.GetsockoptInt(s.fd, syscall.SOL_SOCKET, soIncomingCPU); err == nil && c != -1 {
				syscall.SetsockoptInt(s.fd, syscall.SOL_SOCKET, soIncomingCPU, -1)
				r.st.cpuResets++
			}
		}
	}
	if recv >= 0 {
		r.st.delivered++
	}
	r.outcome = r.sockName(recv)
	ifindex := r.e.arrive[o.dst.Addr()]
	kModel := r.m.lookup(p.addr, o.dst, ifindex, featAll)
	dModel := r.m.lookup(p.addr, o.dst, ifindex, featAll&^r.excuse)
	for _, f := range featureNames {
		if !slices.Equal(r.m.lookup(p.addr, o.dst, ifindex, featAll&^f.f), kModel) {
			r.st.matters["send/"+f.name]++
		}
	}
	line := fmt.Sprintf("send %v -> %v (arrives on %s)", p.addr, o.dst, r.devName(ifindex))
	got := make([]int, len(r.tables))
	groups := make([][]int, len(r.tables))
	for i, t := range r.tables {
		ts, v := t.t.Lookup(p.addr, o.dst, ifindex)
		got[i] = -1
		if ts != nil {
			got[i] = v
			if s := r.socks[v]; s == nil || s.ts[i] != ts {
				r.failf(step, "send: table returned a socket that is not open", "%s: table %s returned s%d, which is not an open socket of it", line, t.name, v)
				return
			}
			groups[i] = r.tableGroup(v)
		}
	}
	if recv >= 0 && len(r.tableGroup(recv)) > 1 {
		r.st.groups++
	}
	tableSays := func() string {
		var p []string
		for i, t := range r.tables {
			s := r.sockName(got[i])
			if len(groups[i]) > 1 {
				s += " of " + setName(groups[i])
			}
			p = append(p, fmt.Sprintf("%s %s", t.name, s))
		}
		return strings.Join(p, ", ")
	}
	in := func(x int, set []int) bool { return slices.Contains(set, x) }
	if slices.Equal(kModel, dModel) {
		r.tracef("%s -> kernel %s; table %s", line, r.sockName(recv), tableSays())
		if !(recv < 0 && len(kModel) == 0 || recv >= 0 && in(recv, kModel)) {
			r.st.modelMisses++
			r.tracef("    (model said %s)", setName(kModel))
		}
		for i := range r.tables {
			ok := recv < 0 && got[i] < 0 || recv >= 0 && got[i] >= 0 && in(recv, groups[i])
			if !ok {
				kind := "send: kernel none, table a socket"
				switch {
				case recv >= 0 && got[i] < 0:
					kind = "send: kernel a socket, table none"
				case recv >= 0:
					kind = "send: kernel and table chose different sockets"
				}
				// Which kernel feature, switched off in the model, gives
				// the table's answer? That names the cause.
				var expl feature
				for _, f := range featureNames {
					if r.excuse&f.f == 0 && ruleOK(r.m.lookup(p.addr, o.dst, ifindex, featAll&^(r.excuse|f.f)), got[i], groups[i]) {
						expl |= f.f
					}
				}
				kind += explained(expl)
				r.failf(step, kind, "%s: kernel delivered to %s; table: %s; model of the kernel: %s (with %v off: %s)%s",
					line, r.sockName(recv), tableSays(), setName(kModel), r.excuse, setName(dModel), explained(expl))
				return
			}
		}
		return
	}
	var kinds feature
	for _, f := range featureNames {
		if r.excuse&f.f != 0 && !slices.Equal(r.m.lookup(p.addr, o.dst, ifindex, featAll&^f.f), kModel) {
			kinds |= f.f
		}
	}
	r.st.deliberate["send/"+kindName(kinds)]++
	r.tracef("%s -> kernel %s (model %s); udpdemux's rule %s; table %s [deliberate difference %s]", line, r.sockName(recv), setName(kModel), setName(dModel), tableSays(), kindName(kinds))
	for i := range r.tables {
		if !ruleOK(dModel, got[i], groups[i]) {
			var expl feature
			for _, f := range featureNames {
				if r.excuse&f.f == 0 && ruleOK(r.m.lookup(p.addr, o.dst, ifindex, featAll&^(r.excuse|f.f)), got[i], groups[i]) {
					expl |= f.f
				}
			}
			r.failf(step, fmt.Sprintf("send (deliberate %s): table differs from udpdemux's rule%s", kindName(kinds), explained(expl)),
				"%s: deliberate difference %s: udpdemux's rule says %s (kernel %s); table: %s%s", line, kindName(kinds), setName(dModel), r.sockName(recv), tableSays(), explained(expl))
			return
		}
	}
	if !(recv < 0 && len(kModel) == 0 || recv >= 0 && in(recv, kModel)) {
		r.failf(step, "send: kernel differs from the model on a deliberate step",
			"%s: the model predicted kernel %s (deliberate difference %s) but the kernel delivered to %s: the detection is wrong here", line, setName(kModel), kindName(kinds), r.sockName(recv))
	}
}

// ruleOK reports whether a table that returned socket got, of group group,
// gave the answer want.
func ruleOK(want []int, got int, group []int) bool {
	if len(want) == 0 || got < 0 {
		return len(want) == 0 && got < 0
	}
	for _, x := range want {
		if !slices.Contains(group, x) {
			return false
		}
	}
	return true
}

// kindName names the features that make a deliberate step; "combined" when
// no single one does, only several together.
func kindName(f feature) string {
	if f == 0 {
		return "combined"
	}
	return f.String()
}

func explained(f feature) string {
	if f == 0 {
		return " [no modelled kernel feature explains it]"
	}
	return fmt.Sprintf(" [the table acts as if the kernel had no %v]", f)
}

func (r *runner) sortedSocks() []*rsock {
	out := make([]*rsock, 0, len(r.socks))
	for _, s := range r.socks {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *rsock) int { return a.id - b.id })
	return out
}

// gen makes the ops of a scenario one at a time, looking at the runner's
// state (which sockets are open and connected) so that most ops matter.
type gen struct {
	rng    *rand.Rand
	e      *env
	nextID int
	filled bool
}

func (g *gen) pick(n int) int { return g.rng.IntN(n) }

func (g *gen) chance(pct int) bool { return g.rng.IntN(100) < pct }

func (g *gen) next(r *runner) []op {
	open := r.sortedSocks()
	w := g.pick(100)
	switch {
	case len(open) == 0 || w < 30:
		return []op{g.bindOp(r, open)}
	case w < 40:
		s := open[g.pick(len(open))]
		if s.connected && g.chance(60) {
			s = open[g.pick(len(open))] // prefer unconnected ones, a little
		}
		return []op{{kind: opConnect, id: s.id, peer: g.peerFor(s)}}
	case w < 47:
		return []op{{kind: opClose, id: open[g.pick(len(open))].id}}
	case w < 49 && !g.filled:
		return g.fill()
	}
	return []op{g.sendOp(r, open)}
}

func (g *gen) port() uint16 {
	if g.chance(75) {
		return g.e.ports[0]
	}
	return g.e.ports[g.pick(len(g.e.ports))]
}

func (g *gen) owner() uint32 {
	if g.e.root && g.chance(25) {
		return 1000
	}
	return g.e.uid
}

func (g *gen) device(addr netip.Addr) int {
	if !g.e.root || g.chance(60) {
		return 0
	}
	// Specific IPv6 and v4-mapped binds need the address on the device
	// (else EADDRNOTAVAIL): mostly pick the owner.
	if addr.Is6() && addr != any6 && addr != mappedAny && g.chance(80) {
		if d, ok := g.e.arrive[addr.Unmap()]; ok {
			return d
		}
		if addr.Unmap().Is4() {
			return g.e.devs[0].ifindex
		}
	}
	w := g.pick(100)
	switch {
	case w < 55 || len(g.e.devs) == 1:
		return g.e.devs[0].ifindex
	case w < 85:
		return g.e.devs[1].ifindex
	}
	return g.e.devs[len(g.e.devs)-1].ifindex
}

// weighted picks from pool, the first two twice as likely as the others.
func (g *gen) weighted(pool []netip.Addr) netip.Addr {
	i := g.pick(len(pool) + 2)
	if i >= len(pool) {
		i = (i - len(pool)) % len(pool)
	}
	return pool[i]
}

func (g *gen) bindOp(r *runner, open []*rsock) op {
	id := g.nextID
	g.nextID++
	var b bindSpec
	switch {
	case len(open) > 0 && g.chance(25):
		// Same options as an open socket, one of them sometimes changed:
		// groups, ties and near-conflicts.
		b = open[g.pick(len(open))].spec
		switch g.pick(6) {
		case 0:
			b.reuseAddr = !b.reuseAddr
		case 1:
			b.reusePort = !b.reusePort
		case 2:
			b.owner = g.owner()
		case 3:
			b.dev = g.device(b.addr)
		}
	default:
		b.port = g.port()
		fam6 := g.chance(50)
		switch {
		case len(open) > 0 && g.chance(30):
			// The address of an open socket, or its other-family form.
			a := open[g.pick(len(open))].spec.addr
			b.port = open[g.pick(len(open))].spec.port
			switch {
			case a.Is4() && fam6:
				a = netip.AddrFrom16(a.As16())
			case a.Is4In6() && !fam6:
				a = a.Unmap()
			case a == any6 && !fam6:
				a = any4
			case a == any4 && fam6:
				a = any6
			}
			b.addr = a
		case fam6:
			b.addr = g.weighted(g.e.bind6)
		default:
			b.addr = g.weighted(g.e.bind4)
		}
		b.reuseAddr = g.chance(40)
		b.reusePort = g.chance(40)
		b.owner = g.owner()
		b.dev = g.device(b.addr)
		b.v6only = b.addr.Is6() && g.chance(25)
	}
	if b.addr.Is4() {
		b.v6only = false
	}
	return op{kind: opBind, id: id, bind: b}
}

// fill binds 11 to 13 sockets on distinct addresses of one port, so that its
// primary chain is longer than 10 (the kernel's and the hybrid rule's
// threshold).
func (g *gen) fill() []op {
	g.filled = true
	pool := g.e.fillers4
	if len(g.e.fillers6) > 0 && g.chance(35) {
		pool = g.e.fillers6
	}
	port := g.port()
	n := 11 + g.pick(3)
	if n > len(pool) {
		n = len(pool)
	}
	var ops []op
	for i := 0; i < n; i++ {
		b := bindSpec{addr: pool[i], port: port, reuseAddr: g.chance(30), reusePort: g.chance(30), owner: g.e.uid}
		ops = append(ops, op{kind: opBind, id: g.nextID, bind: b})
		g.nextID++
	}
	return ops
}

// peerFor picks a peer for socket s to connect to.
func (g *gen) peerFor(s *rsock) int {
	var cands []int
	for i, p := range g.e.peers {
		if p.addr.Addr().Is4() && (!s.spec.addr.Is6() || !s.v6only || g.chance(10)) || p.addr.Addr().Is6() && s.spec.addr.Is6() {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return 0
	}
	return cands[g.pick(len(cands))]
}

func (g *gen) sendOp(r *runner, open []*rsock) op {
	// A datagram from the peer of a connected socket, to its address.
	if g.chance(30) {
		var conn []*rsock
		for _, s := range open {
			if s.connected {
				conn = append(conn, s)
			}
		}
		if len(conn) > 0 {
			s := conn[g.pick(len(conn))]
			if s.spec.addr.Is6() && !s.v6only && s.local.Addr().Is6() && !s.local.Addr().Is4In6() && g.chance(50) {
				// A dual-stack socket connected to an IPv6 peer keeps the
				// IPv4 placeholder address 127.0.0.6 (and no IPv4 peer
				// address): IPv4 datagrams to it with the peer's port.
				var v4 []int
				for i, p := range g.e.peers {
					if p.addr.Addr().Is4() {
						v4 = append(v4, i)
					}
				}
				return op{kind: opSend, peer: v4[g.pick(len(v4))], dst: netip.AddrPortFrom(placeholder, s.local.Port())}
			}
			for i, p := range g.e.peers {
				if p.addr == netip.AddrPortFrom(s.remote.Addr().Unmap(), s.remote.Port()) {
					dst := netip.AddrPortFrom(s.local.Addr().Unmap(), s.local.Port())
					if p.addr.Addr().Is4() && dst.Addr().Is6() {
						// Connected again, from an IPv6 peer to an IPv4
						// one: it keeps its IPv6 address, and IPv4
						// reaches it only at the placeholder.
						dst = netip.AddrPortFrom(placeholder, s.local.Port())
					}
					if _, ok := g.e.arrive[dst.Addr()]; ok {
						return op{kind: opSend, peer: i, dst: dst}
					}
				}
			}
		}
	}
	port := g.port()
	if len(open) > 0 && g.chance(85) {
		port = open[g.pick(len(open))].spec.port
	}
	v6 := len(g.e.dst6) > 0 && g.chance(40)
	var dst netip.Addr
	if len(open) > 0 && g.chance(50) {
		a := open[g.pick(len(open))].spec.addr.Unmap()
		if _, ok := g.e.arrive[a]; ok {
			dst, v6 = a, a.Is6()
		}
	}
	if !dst.IsValid() {
		if v6 {
			dst = g.weighted(g.e.dst6)
		} else {
			dst = g.weighted(g.e.dst4)
		}
	}
	var peers []int
	for i, p := range g.e.peers {
		if p.addr.Addr().Is6() == v6 {
			peers = append(peers, i)
		}
	}
	return op{kind: opSend, peer: peers[g.pick(len(peers))], dst: netip.AddrPortFrom(dst, port)}
}

// result of running a scenario.
type result struct {
	ops      []op
	fail     *failure
	trace    []string
	st       *stats
	outcomes []string // replay only: the kernel's answer to each op
}

// runScenario generates and runs scenario (seed, index). It runs on the env
// thread.
func runScenario(e *env, seed, index uint64, excuse feature) (result, error) {
	r, err := newRunner(e, excuse, index)
	if err != nil {
		return result{}, err
	}
	defer r.cleanup()
	g := &gen{rng: rand.New(rand.NewPCG(seed, index)), e: e}
	n := 10 + g.pick(31)
	var ops []op
	for len(ops) < n && r.fail == nil {
		for _, o := range g.next(r) {
			ops = append(ops, o)
			if !r.exec(len(ops)-1, o) {
				break
			}
		}
	}
	r.verify(len(ops) - 1)
	r.st.scenarios = 1
	if r.long {
		r.st.longChains = 1
	}
	return result{ops: ops, fail: r.fail, trace: r.trace, st: r.st}, nil
}

// replay runs a fixed list of ops. It runs on the env thread.
func replay(e *env, ops []op, excuse feature, verifyEach bool) (result, error) {
	r, err := newRunner(e, excuse, 0xffff)
	if err != nil {
		return result{}, err
	}
	defer r.cleanup()
	r.verifyEach = verifyEach
	for i, o := range ops {
		if !r.exec(i, o) {
			break
		}
	}
	r.verify(len(ops) - 1)
	return result{ops: ops, fail: r.fail, trace: r.trace, st: r.st, outcomes: r.outcomes}, nil
}

// shrink removes ops from a failing scenario while the same kind of
// failure stays at its last op. It runs on the env thread.
func shrink(e *env, res result, excuse feature) result {
	cur := slices.Clone(res.ops[:res.fail.step+1])
	best := res
	budget := 3000
	for changed := true; changed && budget > 0; {
		changed = false
		for i := len(cur) - 2; i >= 0 && budget > 0; i-- {
			cand := slices.Delete(slices.Clone(cur), i, i+1)
			budget--
			got, err := replay(e, cand, excuse, false)
			if err != nil || got.fail == nil || got.fail.step != len(cand)-1 || got.fail.kind != res.fail.kind {
				continue
			}
			cur, best, changed = cand, got, true
		}
	}
	if len(cur) == len(res.ops[:res.fail.step+1]) {
		// Nothing removed: replay once for a trace that ends at the failure.
		if got, err := replay(e, cur, excuse, false); err == nil && got.fail != nil {
			best = got
		}
	}
	best.ops = cur
	return best
}
