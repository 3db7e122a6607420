//go:build linux

package conformance

import (
	"math/rand/v2"
	"net/netip"
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
	opDisconnect // connect(AF_UNSPEC)
	opSetDev     // SO_BINDTODEVICE after bind
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
	dev  int            // setdev: the device, 0 for none
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
