//go:build linux

package conformance

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// The runner's steps: each op runs on the kernel, the kernel model and the
// tables, and the classifier (classify_linux_test.go) decides what the
// tables must answer.

// kernelBind makes and binds a kernel socket.
func kernelBind(b bindSpec) (int, syscall.Errno, error) {
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
	fd, kerr, err := kernelBind(b)
	line := fmt.Sprintf("s%d = bind %s", o.id, r.specString(b))
	r.outcome = demuxtest.ErrnoName(kerr)
	if err != nil {
		r.failf(step, "env", "%s: %v", line, err)
		return
	}
	if kerr == syscall.EADDRNOTAVAIL || kerr == syscall.ENODEV {
		// The address is not usable with that device here: a question of
		// the host's addresses, which the table does not know.
		r.st.envSkips++
		r.tracef("%s -> kernel %s (environment; not asked of the table)", line, demuxtest.ErrnoName(kerr))
		return
	}
	answer := func(on feature) syscall.Errno { return r.m.check(b, on) }
	v := classify(r.e.kern, r.excuse, answer, func(a, b syscall.Errno) bool { return a == b })
	r.st.countMatters("bind", v.matters)
	cause := func(got syscall.Errno) feature {
		return explain(r.excuse, answer, func(a syscall.Errno) bool { return a == got })
	}
	opts := demux.Options(b.options())
	terr := make([]syscall.Errno, len(r.tables))
	tsocks := make([]*demux.Socket[int], len(r.tables))
	var tmsgs []string
	for i, t := range r.tables {
		s, err := t.t.Bind(opts, o.id)
		terr[i], tsocks[i] = demuxtest.Errno(err), s
		if err != nil {
			tmsgs = append(tmsgs, fmt.Sprintf("%s: %v", t.name, err))
		}
	}
	tableSays := func() string {
		var p []string
		for i, t := range r.tables {
			p = append(p, fmt.Sprintf("%s %s", t.name, demuxtest.ErrnoName(terr[i])))
		}
		return strings.Join(p, ", ")
	}
	keep := kerr == 0 // whether the socket stays open (on both sides)
	if !v.deliberate {
		r.tracef("%s -> %s", line, demuxtest.ErrnoName(kerr))
		if kerr != v.kernel {
			r.st.modelMisses++
			r.tracef("    (model said %s)", demuxtest.ErrnoName(v.kernel))
		}
		for i := range r.tables {
			if terr[i] != kerr {
				expl := cause(terr[i])
				r.failf(step, fmt.Sprintf("bind: kernel %s, table %s%s", demuxtest.ErrnoName(kerr), demuxtest.ErrnoName(terr[i]), explained(expl)),
					"%s: kernel %s; table: %s (%s); model of the kernel: %s%s", line, demuxtest.ErrnoName(kerr), tableSays(), strings.Join(tmsgs, "; "), demuxtest.ErrnoName(v.kernel), explained(expl))
				break
			}
		}
	} else {
		kind := kindName(v.kinds, r.e.kern)
		r.st.deliberate["bind/"+kind]++
		r.tracef("%s -> kernel %s, table %s [deliberate difference %s]", line, demuxtest.ErrnoName(kerr), demuxtest.ErrnoName(v.rule), kind)
		for i := range r.tables {
			if terr[i] != v.rule {
				expl := cause(terr[i])
				r.failf(step, fmt.Sprintf("bind (deliberate %s): rule %s, table %s%s", kind, demuxtest.ErrnoName(v.rule), demuxtest.ErrnoName(terr[i]), explained(expl)),
					"%s: deliberate difference %s; udpdemux's rule says %s (kernel %s); table: %s (%s)%s", line, kind, demuxtest.ErrnoName(v.rule), demuxtest.ErrnoName(kerr), tableSays(), strings.Join(tmsgs, "; "), explained(expl))
				break
			}
		}
		if r.fail == nil && kerr != v.kernel {
			r.failf(step, "bind: kernel differs from the model on a deliberate step",
				"%s: the model predicted kernel %s (deliberate difference %s) but the kernel said %s: the detection is wrong here", line, demuxtest.ErrnoName(v.kernel), kind, demuxtest.ErrnoName(kerr))
		}
		keep = kerr == 0 && v.rule == 0
	}
	r.st.binds[demuxtest.ErrnoName(kerr)]++
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
			if err := r.m.bindClosed(b); err != nil {
				r.failf(step, "bind: kernel ok, model error", "%s: kernel ok; model: %v", line, err)
			}
		}
		for i, t := range r.tables {
			if tsocks[i] != nil {
				t.t.Close(tsocks[i])
			}
		}
		return
	}
	if err := r.m.insert(o.id, b); err != nil {
		r.failf(step, "bind: kernel ok, model error", "%s: kernel ok; model: %v", line, err)
	}
	v6only := b.v6only || (b.addr.Is6() && b.addr != any6 && !b.addr.Is4In6())
	r.socks[o.id] = &rsock{id: o.id, spec: b, v6only: v6only, fd: fd, ts: tsocks, local: sockname(fd), dev: b.dev}
	n := 0
	for _, s := range r.socks {
		if s.spec.port == b.port {
			n++
		}
	}
	r.long = r.long || n > 10
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
		r.st.connectFails[demuxtest.ErrnoName(en)]++
		r.outcome = demuxtest.ErrnoName(en)
		r.connectFailed(step, s, remote, en)
		return
	}
	r.st.connects++
	local := sockname(s.fd)
	r.outcome = "local " + local.Addr().String()
	line := fmt.Sprintf("connect s%d %v (kernel: ok, local %v)", o.id, remote, local)
	if err := r.m.connect(o.id, remote, local.Addr()); err != nil {
		r.failf(step, "connect: kernel ok, model error", "%s: model: %v", line, err)
		return
	}
	if local.Addr().Unmap().IsUnspecified() {
		// Routing found no source: the table gets the unspecified
		// address, as getsockname shows it.
		r.st.keepWild++
		line += " [keeps the wildcard]"
	}
	r.tracef("%s", line)
	for i, t := range r.tables {
		if err := t.t.Connect(s.ts[i], remote, local.Addr()); err != nil {
			r.failf(step, "connect: kernel ok, table error", "%s: table %s: Connect(%v, %v): %v", line, t.name, remote, local.Addr(), err)
			return
		}
		if l, p := s.ts[i].LocalAddr(), s.ts[i].RemoteAddr(); l != local || p != remote {
			r.failf(step, "connect: table's addresses differ from the kernel's", "%s: table %s: local %v, remote %v", line, t.name, l, p)
			return
		}
	}
	s.connected, s.remote, s.local, s.disconnected = true, remote, local, false
}

// doDisconnect disconnects a socket (connect with AF_UNSPEC) on every side.
// The tables must accept it and then report the kernel's local address and
// no peer.
func (r *runner) doDisconnect(step int, o op) {
	s := r.socks[o.id]
	if s == nil {
		r.tracef("disconnect s%d: not open", o.id)
		return
	}
	if err := disconnect(s.fd); err != nil {
		r.failf(step, "env", "disconnect s%d: %v", o.id, err)
		return
	}
	r.st.disconnects++
	if s.connected && s.spec.reusePort {
		r.st.rpDisconnects++
	}
	if err := r.m.disconnect(o.id); err != nil {
		r.failf(step, "disconnect: model error", "disconnect s%d: model: %v", o.id, err)
		return
	}
	local := sockname(s.fd)
	r.outcome = "local " + local.Addr().String()
	line := fmt.Sprintf("disconnect s%d (kernel: local %v)", o.id, local)
	r.tracef("%s", line)
	for i, t := range r.tables {
		if err := t.t.Disconnect(s.ts[i]); err != nil {
			r.failf(step, "disconnect: table error", "%s: table %s: %v", line, t.name, err)
			return
		}
		if l, p := s.ts[i].LocalAddr(), s.ts[i].RemoteAddr(); l != local || p.IsValid() {
			r.failf(step, "disconnect: table's addresses differ from the kernel's", "%s: table %s: local %v, remote %v", line, t.name, l, p)
			return
		}
	}
	if s.connected {
		s.oldPeer = s.remote
	}
	s.connected, s.remote, s.local, s.dev, s.disconnected = false, netip.AddrPort{}, local, 0, true
}

// doSetDev binds a socket to a device after bind (SO_BINDTOIFINDEX; 0
// unbinds it) on every side. The tables must accept it and keep the
// socket's addresses.
func (r *runner) doSetDev(step int, o op) {
	s := r.socks[o.id]
	if s == nil {
		r.tracef("setdev s%d: not open", o.id)
		return
	}
	if err := syscall.SetsockoptInt(s.fd, syscall.SOL_SOCKET, soBindToIfindex, o.dev); err != nil {
		r.failf(step, "env", "setdev s%d %s: %v", o.id, r.devName(o.dev), err)
		return
	}
	r.st.setdevs++
	switch {
	case s.connected:
		r.st.setdevConnected++
	case s.disconnected:
		r.st.setdevDisconnected++
	}
	if o.dev == s.dev {
		r.st.setdevSame++
	}
	if err := r.m.setDevice(o.id, o.dev); err != nil {
		r.failf(step, "setdev: model error", "setdev s%d: model: %v", o.id, err)
		return
	}
	r.outcome = "ok"
	line := fmt.Sprintf("setdev s%d %s", o.id, r.devName(o.dev))
	r.tracef("%s", line)
	for i, t := range r.tables {
		if err := t.t.SetDevice(s.ts[i], o.dev); err != nil {
			r.failf(step, "setdev: table error", "%s: table %s: %v", line, t.name, err)
			return
		}
		if l, p := s.ts[i].LocalAddr(), s.ts[i].RemoteAddr(); l != s.local || p != s.remote {
			r.failf(step, "setdev: table's addresses changed", "%s: table %s: local %v, remote %v (kernel %v, %v)", line, t.name, l, p, s.local, s.remote)
			return
		}
	}
	s.dev = o.dev
}

// connectFailed asks the tables the connect of s to remote that the kernel
// refused with en, when the table can know the answer: an error of the
// addresses' families (EAFNOSUPPORT; ENETUNREACH for an IPv4 peer on a
// V6Only socket), or EADDRNOTAVAIL, routing's "no IPv6 source", which the
// caller tells the table by passing the unspecified address. The tables must
// refuse it with en and leave the socket as it was. Other errors are
// routing's (no route through the socket's device, a loopback source
// through another device), which the table does not know.
func (r *runner) connectFailed(step int, s *rsock, remote netip.AddrPort, en syscall.Errno) {
	line := fmt.Sprintf("connect s%d %v -> kernel %s", s.id, remote, demuxtest.ErrnoName(en))
	switch {
	case en == syscall.EAFNOSUPPORT || en == syscall.EADDRNOTAVAIL:
	case en == syscall.ENETUNREACH && s.v6only && remote.Addr().Is4In6():
	default:
		r.tracef("%s (a routing answer; not asked of the table)", line)
		return
	}
	r.tracef("%s", line)
	r.st.connectErrs++
	if en == syscall.EADDRNOTAVAIL {
		r.st.noSource++
	}
	var src netip.Addr // a specific socket has its source
	if s.local.Addr().Unmap().IsUnspecified() {
		src = netip.IPv6Unspecified()
		if remote.Addr().Unmap().Is4() {
			src = netip.IPv4Unspecified()
		}
	}
	for i, t := range r.tables {
		l, p := s.ts[i].LocalAddr(), s.ts[i].RemoteAddr()
		err := t.t.Connect(s.ts[i], remote, src)
		if got := demuxtest.Errno(err); got != en {
			r.failf(step, fmt.Sprintf("connect: kernel %s, table %s", demuxtest.ErrnoName(en), demuxtest.ErrnoName(got)),
				"%s: table %s: Connect(%v, %v): %v", line, t.name, remote, src, err)
			return
		}
		if l2, p2 := s.ts[i].LocalAddr(), s.ts[i].RemoteAddr(); l2 != l || p2 != p {
			r.failf(step, "connect: a refused connect changed the table's socket",
				"%s: table %s: local %v, remote %v before; %v, %v after", line, t.name, l, p, l2, p2)
			return
		}
	}
}

func (r *runner) doClose(step int, o op) {
	s := r.socks[o.id]
	if s == nil {
		r.tracef("close s%d: not open", o.id)
		return
	}
	r.st.closes++
	syscall.Close(s.fd)
	if err := r.m.close(o.id); err != nil {
		r.failf(step, "close: model error", "close s%d: model: %v", o.id, err)
		return
	}
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
		if x.spec.reusePort && !x.connected && x.local == s.local && x.spec.addr.Is6() == s.spec.addr.Is6() &&
			x.dev == s.dev && x.v6only == s.v6only && x.spec.owner == s.spec.owner {
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
	r.countAfterDisconnect(p.addr, o.dst)
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
		if s := r.socks[recv]; s.connected && s.local.Addr().Unmap().IsUnspecified() {
			r.st.toKeptWild++
		}
	}
	r.outcome = r.sockName(recv)
	ifindex := r.e.arrive[o.dst.Addr()]
	answer := func(on feature) []int { return r.m.lookup(p.addr, o.dst, ifindex, on) }
	v := classify(r.e.kern, r.excuse, answer, slices.Equal[[]int])
	r.st.countMatters("send", v.matters)
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
	// cause names what makes table i answer as it did.
	cause := func(i int) feature {
		return explain(r.excuse, answer, func(want []int) bool { return ruleOK(want, got[i], groups[i]) })
	}
	kernelAsModelled := recv < 0 && len(v.kernel) == 0 || recv >= 0 && slices.Contains(v.kernel, recv)
	if !kernelAsModelled && recv >= 0 && slices.Contains(r.m.strays(p.addr, o.dst, ifindex), recv) {
		// Found by chance in its old 4-tuple slot (model.Strays): the
		// tables must give the model's answer.
		r.st.slotCollisions++
		r.tracef("%s -> kernel %s, from its old 4-tuple slot; model %s; udpdemux's rule %s; table %s [4-tuple slot collision]",
			line, r.sockName(recv), setName(v.kernel), setName(v.rule), tableSays())
		for i := range r.tables {
			if !ruleOK(v.rule, got[i], groups[i]) {
				expl := cause(i)
				r.failf(step, "send (4-tuple slot collision): table differs from udpdemux's rule"+explained(expl),
					"%s: the kernel found %s in its old 4-tuple slot; udpdemux's rule says %s; table: %s%s", line, r.sockName(recv), setName(v.rule), tableSays(), explained(expl))
				return
			}
		}
		return
	}
	if !v.deliberate {
		r.tracef("%s -> kernel %s; table %s", line, r.sockName(recv), tableSays())
		if !kernelAsModelled {
			r.st.modelMisses++
			r.tracef("    (model said %s)", setName(v.kernel))
		}
		for i := range r.tables {
			ok := recv < 0 && got[i] < 0 || recv >= 0 && got[i] >= 0 && slices.Contains(groups[i], recv)
			if !ok {
				kind := "send: kernel none, table a socket"
				switch {
				case recv >= 0 && got[i] < 0:
					kind = "send: kernel a socket, table none"
				case recv >= 0:
					kind = "send: kernel and table chose different sockets"
				}
				expl := cause(i)
				r.failf(step, kind+explained(expl), "%s: kernel delivered to %s; table: %s; model of the kernel: %s (with %v off: %s)%s",
					line, r.sockName(recv), tableSays(), setName(v.kernel), r.excuse, setName(v.rule), explained(expl))
				return
			}
		}
		return
	}
	kind := kindName(v.kinds, r.e.kern)
	r.st.deliberate["send/"+kind]++
	r.tracef("%s -> kernel %s (model %s); udpdemux's rule %s; table %s [deliberate difference %s]", line, r.sockName(recv), setName(v.kernel), setName(v.rule), tableSays(), kind)
	for i := range r.tables {
		if !ruleOK(v.rule, got[i], groups[i]) {
			expl := cause(i)
			r.failf(step, fmt.Sprintf("send (deliberate %s): table differs from udpdemux's rule%s", kind, explained(expl)),
				"%s: deliberate difference %s: udpdemux's rule says %s (kernel %s); table: %s%s", line, kind, setName(v.rule), r.sockName(recv), tableSays(), explained(expl))
			return
		}
	}
	if !kernelAsModelled {
		r.failf(step, "send: kernel differs from the model on a deliberate step",
			"%s: the model predicted kernel %s (deliberate difference %s) but the kernel delivered to %s: the detection is wrong here", line, setName(v.kernel), kind, r.sockName(recv))
	}
}

// countAfterDisconnect counts a datagram that a disconnected socket could
// take, from an address other than its old peer's: by the socket's kind
// (IPv4, IPv6-only, dual-stack) and the datagram's family.
func (r *runner) countAfterDisconnect(src, dst netip.AddrPort) {
	for _, s := range r.socks {
		if !s.disconnected || s.spec.port != dst.Port() || s.oldPeer.Addr().Unmap() == src.Addr() {
			continue
		}
		kind := "ipv4"
		switch {
		case s.spec.addr.Is6() && s.v6only:
			kind = "ipv6"
		case s.spec.addr.Is6():
			kind = "dual"
		}
		fam := "/v4"
		if dst.Addr().Is6() {
			fam = "/v6"
		}
		r.st.afterDisconnect[kind+fam]++
		return
	}
}
