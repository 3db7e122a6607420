package main

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// bind0Frees are the numbers of free ports the scenario measures.
var bind0Frees = []int{5000, 100, 10, 1, 0}

func (r *runner) bind0() {
	targets := slices.Clone(suite.Bind0Targets)
	if r.c.kernel {
		targets = append(targets, suite.Kernel)
	}
	r.printf("bind(0) on 0.0.0.0 then close, in a %s-port ephemeral range (%d–%d) where every port but the free ones "+
		"(scattered at random) holds a socket on 0.0.0.0; udpdemux with %d slots, the UDP hash size Linux chose on "+
		"this machine kind. udpdemux's algorithms: *pre-2009 linear* (random start, port after port, the chain "+
		"rescanned for each), *kernel bitmap* (Linux since 2.6.30), *occupancy index* (the default). gVisor: "+
		"`PortManager.ReservePort` with port 0 then `ReleasePort`. Linux: `socket`, `bind` to port 0 and `close` "+
		"in a network namespace whose `ip_local_port_range` is the same range (the `socket` call is included: a "+
		"socket cannot be bound twice).\n\n",
		fmtInt(suite.Bind0Range), suite.Bind0Low, suite.Bind0High, suite.Bind0Slots)
	ms := map[int]map[string]meas{}
	kernelOK := r.c.kernel
	for _, free := range bind0Frees {
		ms[free] = map[string]meas{}
		for _, tg := range targets {
			if tg == suite.Kernel && !kernelOK {
				continue
			}
			r.detail(" bind(0), %d free: %s", free, tg.Name)
			f, err := suite.PrepareBind0(tg, free, r.c.seed)
			if err == nil {
				err = f.Check()
			}
			if err != nil {
				if tg == suite.Kernel && errors.Is(err, suite.ErrNoNamespace) {
					kernelOK = false
					r.notes = append(r.notes, fmt.Sprintf("Linux bind(0) not measured: %v", err))
					r.printf("Linux not measured: %v.\n\n", err)
					continue
				}
				r.fail("bind(0) %s, %d free: %v", tg.Name, free, err)
				if f != nil {
					f.Close()
				}
				continue
			}
			m := r.bench(fmt.Sprintf("bind(0) %d free %s", free, tg.Name), f.Bench())
			f.Close()
			ms[free][tg.Name] = m
			if m.ok {
				r.set(key{scen: scBind0, n: free, target: tg.Name, m: bind0Ns}, m.ns)
			}
			runtime.GC()
		}
	}
	head := []string{"free ports"}
	for _, tg := range targets {
		head = append(head, tg.Name)
	}
	head = append(head, "index vs gVisor", "index vs Linux")
	t := newTable(head...)
	ser := map[string]*series{}
	for _, tg := range targets {
		ser[tg.Name] = &series{name: tg.Name}
	}
	for _, free := range bind0Frees {
		row := []string{fmt.Sprint(free)}
		if free == 0 {
			row[0] = "0 (bind fails)"
		}
		for _, tg := range targets {
			m, ok := ms[free][tg.Name]
			if !ok || !m.ok {
				row = append(row, "—")
				continue
			}
			row = append(row, fmtNs(m.ns))
			ser[tg.Name].add(bind0X(free), m.ns)
		}
		idx := ms[free][suite.Index.Name]
		for _, other := range []string{suite.GVisorPorts.Name, suite.Kernel.Name} {
			if o, ok := ms[free][other]; ok && o.ok && idx.ok {
				row = append(row, fmtFaster(o.ns/idx.ns))
			} else {
				row = append(row, "—")
			}
		}
		t.add(row...)
	}
	r.printf("%s\nColumns: time per bind(0) and close (lower is better); *index vs gVisor*, *index vs Linux*: how many "+
		"times faster (or slower) the occupancy index is than gVisor and than the kernel. — means not measured.\n\n", t)
	if kernelOK {
		m := r.bench("linux socket+close (no bind)", suite.KernelSocketClose())
		if m.ok {
			r.printf("For scale: `socket` + `close` alone, without `bind`, take %s in Linux.\n\n", fmtNs(m.ns))
		}
	}
	var ss []series
	for _, tg := range targets {
		if len(ser[tg.Name].xs) > 0 {
			ss = append(ss, *ser[tg.Name])
		}
	}
	var ticks []tick
	for _, free := range bind0Frees {
		label := fmt.Sprint(free)
		if free == 0 {
			label = "0 (full)"
		}
		ticks = append(ticks, tick{bind0X(free), label})
	}
	r.plot("bind0.svg", fmt.Sprintf("bind(0) and close vs free ports (%s-port range)", fmtInt(suite.Bind0Range)),
		"free ports", ss, ticks)
	r.repro()
}

// bind0X places a number of free ports on the plot's logarithmic x axis,
// with 0 (a full range) left of 1.
func bind0X(free int) float64 {
	if free == 0 {
		return 0.3
	}
	return float64(free)
}

// repro runs the reproducer of the bind(0) livelock.
func (r *runner) repro() {
	const g, free = 64, 128
	d := reproTime.at(r.c.quick)
	r.printf("**The bind(0) livelock reproducer**: the same range, all but %d ports (scattered) in use; %d goroutines "+
		"each loop: bind(0) on 0.0.0.0, close the sockets on the two neighbouring ports (binding a port again when "+
		"its socket was one of those filled in before the run, so that the range stays almost full), close its own "+
		"socket of the previous round. %v per contender. Afterwards the contender must hold exactly the sockets the "+
		"goroutines think are open (and udpdemux's table must pass Verify).\n\n", free, g, d)
	t := newTable("contender", "bind(0)/s", "failed bind(0)", "neighbours closed", "free ports at the end", "check")
	for _, tg := range suite.Bind0Targets {
		r.detail(" reproducer: %s", tg.Name)
		res, err := suite.Reproduce(tg, g, free, d, r.c.seed)
		check := "ok"
		if err != nil {
			r.fail("reproducer %s: %v", tg.Name, err)
			check = "FAILED: " + err.Error()
		} else {
			r.set(key{scen: scBind0, shape: "reproducer", target: tg.Name, m: bindsPerSec}, res.BindsPerSec())
		}
		r.detail("  %s: %s bind(0)", tg.Name, fmtRate(res.BindsPerSec()))
		t.add(tg.Name, fmtRate(res.BindsPerSec()), fmtInt(int(res.Fails)), fmtInt(int(res.Closes)), fmt.Sprint(res.Free), check)
		runtime.GC()
	}
	r.printf("%s\nColumns: *bind(0)/s*: successful and failed bind(0) calls per second, all goroutines together "+
		"(higher is better); *failed bind(0)*: calls that found no free port; *neighbours closed*: sockets the "+
		"goroutines closed on neighbouring ports; *check*: whether the contender held exactly the expected sockets.\n\n", t)
}

func (r *runner) bind0Goals() []goal {
	at := func(free int) []place {
		idx := r.val(key{scen: scBind0, n: free, target: suite.Index.Name, m: bind0Ns})
		label := suite.Index.Name
		if gv := r.val(key{scen: scBind0, n: free, target: suite.GVisorPorts.Name, m: bind0Ns}); !math.IsNaN(gv) {
			label += "; gVisor " + fmtNs(gv)
		}
		if lx := r.val(key{scen: scBind0, n: free, target: suite.Kernel.Name, m: bind0Ns}); !math.IsNaN(lx) {
			label += "; Linux " + fmtNs(lx)
		}
		return []place{{label, idx}}
	}
	return []goal{
		limit("bind(0) with 1 free port in 10 000: ≤ 5 µs (occupancy index)", at(1), true, 5000, fmtNs),
		limit("bind(0) in a full range fails in ≤ 1 µs (occupancy index)", at(0), true, 1000, fmtNs),
		limit("bind(0) with 5000 free ports: ≤ 1 µs (occupancy index)", at(5000), true, 1000, fmtNs),
	}
}
