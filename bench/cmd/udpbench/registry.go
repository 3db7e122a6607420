package main

import "slices"

// scenarioID names a scenario on the command line (-scenarios) and in the
// keys of its figures.
type scenarioID string

// scenario is one part of the suite. Each lives in a file of its own and
// registers itself from an init function.
type scenario struct {
	id    scenarioID
	title string
	// order places the scenario in the run and the report (ascending).
	order int
	// run runs the scenario; nil for an entry that only judges goals on
	// the figures of others.
	run func(*runner)
	// goals judges the scenario's goals on the run's figures; it is
	// called whether or not the scenario ran, so that a goal whose
	// figures are missing reads "not measured".
	goals func(*runner) []goal
}

var registry []scenario

// register adds a scenario to the suite.
func register(s scenario) {
	if slices.ContainsFunc(registry, func(o scenario) bool { return o.id == s.id }) {
		panic("udpbench: scenario " + string(s.id) + " registered twice")
	}
	registry = append(registry, s)
}

// runnable returns the scenarios that run, in order: all but the entries
// that only judge goals.
func runnable() []scenario {
	var s []scenario
	for _, sc := range registered() {
		if sc.run != nil {
			s = append(s, sc)
		}
	}
	return s
}

// registered returns the scenarios in order.
func registered() []scenario {
	s := slices.Clone(registry)
	slices.SortStableFunc(s, func(a, b scenario) int { return a.order - b.order })
	return s
}
