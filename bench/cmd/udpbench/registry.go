package main

// scenarioID names a scenario on the command line (-scenarios) and in the
// keys of its figures.
type scenarioID string

// The scenarios' names.
const (
	scSamePort      scenarioID = "same-port"
	scDistinctPorts scenarioID = "distinct-ports"
	scSweep         scenarioID = "per-port-sweep"
	scMixed         scenarioID = "mixed"
	scScale         scenarioID = "scale"
	scParallel      scenarioID = "parallel"
	scBind0         scenarioID = "bind0"
	scConnected     scenarioID = "connected"
	scScaleDefault  scenarioID = "scale-default"
	scGroup         scenarioID = "reuseport-group"
	scResize        scenarioID = "resize"
	scBatch         scenarioID = "batch"
	scAliasing      scenarioID = "aliasing"
	scFlood         scenarioID = "flood"
	scLoopback      scenarioID = "loopback"
	scServices      scenarioID = "services"
	scPortCost      scenarioID = "port-cost"
	scSlowHandler   scenarioID = "slow-handler"
	scEverywhere    scenarioID = "everywhere"
)

// scenario is one part of the suite.
type scenario struct {
	id    scenarioID
	title string
	// run runs the scenario; nil for an entry that only judges goals on
	// the figures of others.
	run func(*runner)
	// goals judges the scenario's goals on the run's figures; it is
	// called whether or not the scenario ran, so that a goal whose
	// figures are missing reads "not measured".
	goals func(*runner) []goal
}

// scenarios is the suite, in the order of the run and the report.
var scenarios = []scenario{
	{scSamePort, "Same port, many addresses (fixed 65 536 slots)", (*runner).samePort, (*runner).shapeGoals},
	{scDistinctPorts, "One socket per port (fixed 65 536 slots)", (*runner).distinctPorts, nil},
	{scSweep, "Sweep of sockets per port: where the secondary table pays off", (*runner).sweep, nil},
	{scMixed, "Mixed service: a DNS forwarder", (*runner).mixed, nil},
	{scScale, "Scale with fixed 65 536 slots: lookup, bind and heap from 1 000 sockets up", (*runner).scale, (*runner).scaleGoals},
	{scParallel, "Parallel lookups, with and without a writer", (*runner).parallel, (*runner).parallelGoals},
	{scBind0, "bind(0) by occupancy, and the livelock reproducer", (*runner).bind0, (*runner).bind0Goals},
	{scConnected, "Connected sockets on one address and port (default Config)", (*runner).connected, (*runner).connectedGoals},
	{scScaleDefault, "Scale with the default Config: lookup, writes and heap up to 1 000 000 sockets", (*runner).scaleDefault, (*runner).scaleDefaultGoals},
	{scGroup, "A large SO_REUSEPORT group (default Config)", (*runner).group, (*runner).groupGoals},
	{scResize, "Resize under load: growing while two goroutines look up", (*runner).resize, (*runner).resizeGoals},
	{scBatch, "Batch lookups (default Config)", (*runner).batch, (*runner).batchGoals},
	{scAliasing, "Port aliasing attack", (*runner).aliasing, (*runner).aliasingGoals},
	{scFlood, "Floods: many sockets beside a victim, by device, port, or address bits", (*runner).flood, (*runner).floodGoals},
	{scLoopback, "Loopback: the 2009 tester on real sockets", (*runner).loopback, (*runner).loopbackGoals},
	{scServices, "Services: quic-go and miekg/dns on serve.Conns and on kernel sockets", (*runner).services, (*runner).servicesGoals},
	{scPortCost, "Cost of an idle port in use through demux/serve", (*runner).portCost, (*runner).portCostGoals},
	{scSlowHandler, "A slow handler beside a quick one on the same port (demux/serve)", (*runner).slowHandler, (*runner).slowHandlerGoals},
	// Goals that hold for the figures of every scenario.
	{scEverywhere, "", nil, (*runner).everywhereGoals},
}

// runnable returns the scenarios that run, in order: all but the entries
// that only judge goals.
func runnable() []scenario {
	var s []scenario
	for _, sc := range scenarios {
		if sc.run != nil {
			s = append(s, sc)
		}
	}
	return s
}
