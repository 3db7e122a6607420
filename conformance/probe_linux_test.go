//go:build linux

package conformance

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/udpdemux/udpdemux/demux/demuxtest"
	"github.com/udpdemux/udpdemux/internal/model"
)

// Kernels differ in the behaviours the model switches with its features:
// 6.13 brought the 4-tuple hash and the placeholder fallback, and a later
// build of 6.18 no longer stops its bind check at the first compatible
// SO_REUSEPORT socket (deliberate difference 1). So the test does not
// assume a kernel: when it starts, it runs one small scenario per feature
// on real sockets, whose last answer the model gives one way with the
// feature and the other way without it, and compares every step of the
// random scenarios with the model of the kernel it found.

// kprobe finds out whether the running kernel has feature f.
type kprobe struct {
	f feature
	// needs says what the probe needs of the environment: "root" for a
	// namespace of its own (devices, addresses of its own), "ipv6" for
	// IPv6 on loopback; "" for nothing.
	needs string
	// steps builds the probe for the ports and devices of env e.
	steps func(e *env) []pstep
	// off holds features that the probe is read without: those that
	// would hide its feature, which earlier probes decide.
	off feature
}

// pstep is one step of a probe. The answer of the last step decides.
type pstep struct {
	kind   opKind
	sock   int
	bind   bindSpec
	remote netip.AddrPort   // connect
	local  netip.Addr       // connect: the source address routing picks
	src    []netip.AddrPort // send: one datagram from each
	dst    netip.AddrPort   // send
	dev    int              // setdev: the device; send: the arrival interface
}

// probePorts returns the probes' port, the port their peers connect to, and
// a base for their senders' ports.
func probePorts(e *env) (p, q, s uint16) { return e.ports[0], e.ports[1], e.probe + 1 }

func pbind(id int, addr string, port uint16, mod func(*bindSpec)) pstep {
	b := bindSpec{addr: netip.MustParseAddr(addr), port: port}
	if mod != nil {
		mod(&b)
	}
	return pstep{kind: opBind, sock: id, bind: b}
}

func pconnect(id int, remote string, port uint16, local string) pstep {
	return pstep{kind: opConnect, sock: id, remote: netip.AddrPortFrom(netip.MustParseAddr(remote), port), local: netip.MustParseAddr(local)}
}

func psend(from string, ports []uint16, dst string, port uint16, dev int) pstep {
	st := pstep{kind: opSend, dst: netip.AddrPortFrom(netip.MustParseAddr(dst), port), dev: dev}
	for _, p := range ports {
		st.src = append(st.src, netip.AddrPortFrom(netip.MustParseAddr(from), p))
	}
	return st
}

func reuseAddr(b *bindSpec)     { b.reuseAddr = true }
func reusePort(b *bindSpec)     { b.reusePort = true }
func reuseAddrPort(b *bindSpec) { b.reuseAddr, b.reusePort = true, true }

// kprobes are the probes, one per feature the model has.
var kprobes = []kprobe{
	{f: model.Diff1, needs: "", steps: func(e *env) []pstep {
		// A compatible SO_REUSEPORT socket met before a conflicting one.
		p, _, _ := probePorts(e)
		return []pstep{pbind(0, "127.0.0.1", p, nil), pbind(1, "127.0.0.2", p, reusePort), pbind(2, "0.0.0.0", p, reusePort)}
	}},
	{f: model.Diff1Peer, needs: "root", off: model.Diff1, steps: func(e *env) []pstep {
		// A socket of the group the new one joins, met before a
		// conflicting one that coexisted with it by its device, until
		// SO_BINDTODEVICE unbound it.
		p, _, _ := probePorts(e)
		d1, d2 := e.devs[1].ifindex, e.devs[2].ifindex
		return []pstep{
			pbind(0, "127.0.0.1", p, func(b *bindSpec) { b.reuseAddr, b.dev = true, d1 }),
			pbind(1, "127.0.0.1", p, func(b *bindSpec) { b.reusePort, b.dev = true, d2 }),
			{kind: opSetDev, sock: 0},
			pbind(2, "127.0.0.1", p, func(b *bindSpec) { b.reusePort, b.dev = true, d2 })}
	}},
	{f: model.Diff2, needs: "root", steps: func(e *env) []pstep {
		// A SO_REUSEPORT socket met before a better-scoring one.
		p, _, s := probePorts(e)
		lo := e.devs[0].ifindex
		return []pstep{
			pbind(0, "127.0.0.1", p, func(b *bindSpec) { b.reuseAddr, b.dev = true, lo }),
			pbind(1, "127.0.0.1", p, reuseAddrPort),
			psend("127.0.0.1", []uint16{s}, "127.0.0.1", p, lo)}
	}},
	{f: model.Diff3, needs: "ipv6", steps: func(e *env) []pstep {
		// An IPv6 SO_REUSEPORT socket bound after a plain one.
		p, _, s := probePorts(e)
		return []pstep{pbind(0, "::1", p, reuseAddr), pbind(1, "::1", p, reuseAddrPort),
			psend("::1", []uint16{s}, "::1", p, e.devs[0].ifindex)}
	}},
	{f: model.Diff4, needs: "ipv6", steps: func(e *env) []pstep {
		// A bind to the placeholder on a port with more than 10 sockets.
		p, q, _ := probePorts(e)
		st := []pstep{pbind(0, "::", p, nil), pconnect(0, "::1", q, "::1")}
		for i := range 11 {
			st = append(st, pbind(1+i, e.fillers4[i].String(), p, reuseAddr))
		}
		return append(st, pbind(12, addrPlaceholder, p, nil))
	}},
	{f: model.Hash4, needs: "", steps: func(e *env) []pstep {
		// Two sockets connected to one peer: the later connect wins.
		p, q, _ := probePorts(e)
		return []pstep{pbind(0, "127.0.0.1", p, reuseAddr), pbind(1, "127.0.0.1", p, reuseAddr),
			pconnect(1, "127.0.0.1", q, "127.0.0.1"), pconnect(0, "127.0.0.1", q, "127.0.0.1"),
			psend("127.0.0.1", []uint16{q}, "127.0.0.1", p, e.devs[0].ifindex)}
	}},
	{f: model.PlaceholderFallback, needs: "ipv6", steps: func(e *env) []pstep {
		// IPv4 to the placeholder of a dual-stack socket connected to IPv6.
		p, q, _ := probePorts(e)
		return []pstep{pbind(0, "::", p, nil), pconnect(0, "::1", q, "::1"),
			psend("127.0.0.1", []uint16{q}, addrPlaceholder, p, e.devs[0].ifindex)}
	}},
	{f: model.Diff6, needs: "", steps: func(e *env) []pstep {
		// Two wildcard SO_REUSEPORT sockets; one connects, which
		// rehashes it, and disconnects. Sixteen flows: with a group of
		// two, some reach each member.
		p, q, s := probePorts(e)
		var ports []uint16
		for i := range uint16(16) {
			ports = append(ports, s+i)
		}
		return []pstep{pbind(0, "0.0.0.0", p, reusePort), pbind(1, "0.0.0.0", p, reusePort),
			pconnect(0, "127.0.0.1", q, "127.0.0.1"), {kind: opDisconnect, sock: 0},
			psend("127.0.0.1", ports, "127.0.0.1", p, e.devs[0].ifindex)}
	}},
	{f: model.Diff7, needs: "root", steps: func(e *env) []pstep {
		// IPv6 after a disconnect, from an address other than the old
		// peer's.
		p, q, s := probePorts(e)
		return []pstep{pbind(0, "::1", p, nil), pconnect(0, "::1", q, "::1"), {kind: opDisconnect, sock: 0},
			psend("fd00::2", []uint16{s}, "::1", p, e.devs[0].ifindex)}
	}},
}

// modelProbe returns the model's answer to the last step of steps with
// the features on: an errno name for a bind, the receivers of the
// datagrams for a send.
func modelProbe(steps []pstep, on feature) (string, error) {
	m := newModel()
	var out string
	for _, st := range steps {
		var err error
		if out, err = m.probeStep(st, on); err != nil {
			return "", err
		}
	}
	return out, nil
}

// probeStep applies one probe step to the model and returns its answer.
func (m *kmodel) probeStep(st pstep, on feature) (string, error) {
	if _, ok := m.mid[st.sock]; st.kind != opBind && st.kind != opSend && !ok {
		return "", fmt.Errorf("probe step on s%d, which is not bound", st.sock)
	}
	var err error
	switch st.kind {
	case opBind:
		en := m.check(st.bind, on)
		if en == 0 {
			err = m.insert(st.sock, st.bind)
		}
		return demuxtest.ErrnoName(en), err
	case opConnect:
		err = m.connect(st.sock, st.remote, st.local)
	case opDisconnect:
		err = m.disconnect(st.sock)
	case opSetDev:
		err = m.setDevice(st.sock, st.dev)
	case opSend:
		var got []int
		for _, src := range st.src {
			for _, id := range m.lookup(src, st.dst, st.dev, on) {
				if !slices.Contains(got, id) {
					got = append(got, id)
				}
			}
		}
		slices.Sort(got)
		return setName(got), nil
	}
	return "ok", err
}

// kernelProbe runs steps on real sockets and returns the kernel's answer
// to the last one, as modelProbe does. It runs on the env thread.
func (e *env) kernelProbe(steps []pstep) (string, error) {
	fds := map[int]int{}
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	var out string
	for i, st := range steps {
		fd, open := fds[st.sock]
		if st.kind != opBind && st.kind != opSend && !open {
			return "", fmt.Errorf("step %d on s%d, which is not bound", i, st.sock)
		}
		switch st.kind {
		case opBind:
			b := st.bind
			b.owner = e.uid
			fd, en, err := kernelBind(b)
			if err != nil {
				return "", err
			}
			if en == 0 {
				fds[st.sock] = fd
			}
			out = demuxtest.ErrnoName(en)
		case opConnect:
			if err := syscall.Connect(fd, sockaddr(st.remote)); err != nil {
				return "", fmt.Errorf("connect s%d to %v: %w", st.sock, st.remote, err)
			}
			if l := sockname(fd).Addr(); l != st.local {
				return "", fmt.Errorf("connect s%d to %v: local address %v, the probe assumes %v", st.sock, st.remote, l, st.local)
			}
			out = "ok"
		case opDisconnect:
			if err := disconnect(fd); err != nil {
				return "", fmt.Errorf("disconnect s%d: %w", st.sock, err)
			}
			out = "ok"
		case opSetDev:
			if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, soBindToIfindex, st.dev); err != nil {
				return "", fmt.Errorf("SO_BINDTOIFINDEX s%d: %w", st.sock, err)
			}
			out = "ok"
		case opSend:
			got, err := e.probeSend(st, fds)
			if err != nil {
				return "", err
			}
			out = setName(got)
		}
	}
	return out, nil
}

// probeSend sends one datagram from each source of st and returns which of
// fds received them.
func (e *env) probeSend(st pstep, fds map[int]int) ([]int, error) {
	var got []int
	for n, src := range st.src {
		tx, err := socket(src.Addr().Is6(), 0)
		if err != nil {
			return nil, err
		}
		err = syscall.Bind(tx, sockaddr(src))
		if err == nil {
			err = e.send(tx, st.dst, 0x9e0be<<32|uint64(n))
		}
		syscall.Close(tx)
		if err != nil {
			return nil, fmt.Errorf("probe datagram %v -> %v: %w", src, st.dst, err)
		}
		for id, fd := range fds {
			for {
				if _, ok := recvPayload(fd); !ok {
					break
				}
				if !slices.Contains(got, id) {
					got = append(got, id)
				}
			}
		}
	}
	slices.Sort(got)
	return got, nil
}

// decide compares the kernel's answer to a probe with the model's with
// and without its feature.
func decide(f feature, got, with, without string) (bool, error) {
	switch got {
	case with:
		return true, nil
	case without:
		return false, nil
	}
	return false, fmt.Errorf("the kernel answered %s; the model says %s with %v and %s without", got, with, f, without)
}

// probeKernel runs the probes and sets e.kern. A probe that the
// environment cannot run leaves its feature as the model has it (Linux
// 6.18 as first measured) and says so in the notes.
func (e *env) probeKernel() error {
	e.kern = model.Linux
	var found, unprobed []string
	for _, p := range kprobes {
		if p.needs == "root" && (!e.root || len(e.devs) < 3) || p.needs == "ipv6" && len(e.dst6) == 0 {
			unprobed = append(unprobed, p.f.String())
			continue
		}
		steps := p.steps(e)
		with, err := modelProbe(steps, model.Linux&^p.off)
		if err == nil {
			var without, got string
			without, err = modelProbe(steps, model.Linux&^(p.off|p.f))
			if err == nil {
				got, err = e.kernelProbe(steps)
			}
			var has bool
			if err == nil {
				has, err = decide(p.f, got, with, without)
			}
			if err == nil && !has {
				e.kern &^= p.f
			}
			if err == nil {
				found = append(found, fmt.Sprintf("%v %s", p.f, map[bool]string{true: "yes", false: "no"}[has]))
			}
		}
		if err != nil {
			return fmt.Errorf("kernel probe for %v: %w", p.f, err)
		}
	}
	note := "kernel probes: " + strings.Join(found, ", ")
	if len(unprobed) > 0 {
		note += "; not probed here (taken as Linux 6.18 first had them): " + strings.Join(unprobed, ", ")
	}
	e.notes = append(e.notes, note)
	return nil
}

// kernelNote says which features the running kernel has and lacks.
func (e *env) kernelNote() string {
	return fmt.Sprintf("kernel has %v, lacks %v", e.kern, model.Linux&^e.kern)
}
