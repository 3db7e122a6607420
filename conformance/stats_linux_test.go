//go:build linux

package conformance

import (
	"fmt"
	"slices"
	"strings"
)

// stats counts what the scenarios exercised, to show that the run covered
// what it claims.
type stats struct {
	scenarios, ops           int
	binds                    map[string]int // kernel result -> count
	envSkips                 int            // binds the kernel refused for the environment (EADDRNOTAVAIL)
	connects                 int
	keepWild                 int // connects the kernel accepted without a source: the wildcard kept
	connectFails             map[string]int
	connectErrs              int // refused connects compared with the tables
	noSource                 int // of them, EADDRNOTAVAIL: no IPv6 source
	closes                   int
	disconnects              int            // disconnects compared
	rpDisconnects            int            // of them, of connected SO_REUSEPORT sockets
	setdevs                  int            // SO_BINDTODEVICE after bind, compared
	setdevConnected          int            // of them, on connected sockets
	setdevDisconnected       int            // of them, on disconnected sockets
	setdevSame               int            // of them, to the device the socket had
	afterDisconnect          map[string]int // datagrams a disconnected socket could take, not from its old peer: socket kind/family
	sends, delivered, groups int            // datagrams; delivered; delivered to a group of 2 or more
	toKeptWild               int            // datagrams delivered to a connected socket that kept the wildcard
	deliberate               map[string]int
	matters                  map[string]int // steps whose kernel answer depends on a feature
	modelMisses              int            // ordinary steps where the model (not the table) was wrong
	slotCollisions           int            // datagrams the kernel delivered by a 4-tuple slot collision (model.Strays)
	cpuResets                int
	longChains               int // scenarios where a port had more than 10 sockets
}

func newStats() *stats {
	return &stats{binds: map[string]int{}, connectFails: map[string]int{}, deliberate: map[string]int{}, matters: map[string]int{}, afterDisconnect: map[string]int{}}
}

func (s *stats) add(o *stats) {
	s.scenarios += o.scenarios
	s.ops += o.ops
	s.envSkips += o.envSkips
	s.connects += o.connects
	s.keepWild += o.keepWild
	s.connectErrs += o.connectErrs
	s.noSource += o.noSource
	s.closes += o.closes
	s.disconnects += o.disconnects
	s.rpDisconnects += o.rpDisconnects
	s.setdevs += o.setdevs
	s.setdevConnected += o.setdevConnected
	s.setdevDisconnected += o.setdevDisconnected
	s.setdevSame += o.setdevSame
	s.sends += o.sends
	s.delivered += o.delivered
	s.groups += o.groups
	s.toKeptWild += o.toKeptWild
	s.modelMisses += o.modelMisses
	s.slotCollisions += o.slotCollisions
	s.cpuResets += o.cpuResets
	s.longChains += o.longChains
	for _, m := range []struct{ to, from map[string]int }{
		{s.binds, o.binds}, {s.connectFails, o.connectFails}, {s.deliberate, o.deliberate},
		{s.matters, o.matters}, {s.afterDisconnect, o.afterDisconnect},
	} {
		for k, v := range m.from {
			m.to[k] += v
		}
	}
}

func (s *stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d scenarios, %d ops: binds %v (plus %d the kernel refused for the environment, not compared); ", s.scenarios, s.ops, sortedMap(s.binds), s.envSkips)
	fmt.Fprintf(&b, "%d connects (%d keeping the wildcard; kernel refused %v, %d of them compared, %d for want of an IPv6 source); %d closes; %d datagrams, %d delivered, %d to a ReusePort group, %d to a socket that kept the wildcard; ",
		s.connects, s.keepWild, sortedMap(s.connectFails), s.connectErrs, s.noSource, s.closes, s.sends, s.delivered, s.groups, s.toKeptWild)
	fmt.Fprintf(&b, "%d disconnects (%d of connected SO_REUSEPORT sockets); %d SO_BINDTODEVICE after bind (%d on connected sockets, %d on disconnected ones, %d to the same device); datagrams a disconnected socket could take, not from its old peer %v; ",
		s.disconnects, s.rpDisconnects, s.setdevs, s.setdevConnected, s.setdevDisconnected, s.setdevSame, sortedMap(s.afterDisconnect))
	fmt.Fprintf(&b, "deliberate-difference steps (table checked against udpdemux's rule, kernel against the model) %v; ", sortedMap(s.deliberate))
	fmt.Fprintf(&b, "steps whose kernel answer depends on each modelled feature %v; ", sortedMap(s.matters))
	fmt.Fprintf(&b, "%d scenarios with a chain over 10; %d SO_INCOMING_CPU resets; %d ordinary steps where the kernel model was wrong; %d datagrams the kernel delivered by a 4-tuple slot collision (table checked against the model)",
		s.longChains, s.cpuResets, s.modelMisses, s.slotCollisions)
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

// countMatters counts, for each feature in f, a step of kind ("bind",
// "send") whose kernel answer depends on it.
func (s *stats) countMatters(kind string, f feature) {
	for _, n := range each {
		if f&n != 0 {
			s.matters[kind+"/"+n.String()]++
		}
	}
}
