package main

import (
	"math"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// metric says what a figure measures.
type metric uint8

// The metrics.
const (
	lookupNs    metric = iota // time per lookup
	spreadX                   // slowest ÷ fastest lookup over a scenario's sizes
	speedupX                  // lookups on 2 goroutines ÷ on 1 (on each CPU, if pinned)
	bind0Ns                   // bind(0) plus close
	bindsPerSec               // reproducer: bind(0) calls per second
	bindNs                    // bind (and connect) of the next socket
	closeNs                   // close of a socket
	heapBytes                 // heap bytes per socket, or of a whole table
	wrongCount                // wrong or missed answers
	worstNs                   // the worst single lookup
	medianNs                  // the median single lookup
	crossoverK                // sockets per port from which two-phase wins
	allocsPerOp               // allocations per lookup
	ratioX                    // a ratio between two figures
)

// key names one figure of a run. Scenarios record figures and goals read
// them through the same typed fields, so that a renamed scenario, set or
// contender cannot leave a goal reading a key that nobody writes: the
// goal then reads NaN, which it reports as not measured.
type key struct {
	scen   scenarioID
	shape  string // the shape, where a scenario has several
	n      int    // the size: sockets, ports free, ...
	set    string // the datagram set (suite.SetBound, ...)
	target string // the contender (suite.Hybrid.Name, ...)
	writer suite.Writer
	m      metric
}

// set records a figure.
func (r *runner) set(k key, v float64) { r.vals[k] = v }

// val returns a recorded figure, or NaN.
func (r *runner) val(k key) float64 {
	if v, ok := r.vals[k]; ok {
		return v
	}
	return math.NaN()
}

// record stores each lookup time of res under base with its set and
// target filled in.
func (r *runner) record(base key, res *result) {
	for set, ms := range res.m {
		for t, m := range ms {
			if m.ok {
				k := base
				k.set, k.target, k.m = set, t, lookupNs
				r.vals[k] = m.ns
				k.m = allocsPerOp
				r.vals[k] = m.allocs
			}
		}
	}
}
