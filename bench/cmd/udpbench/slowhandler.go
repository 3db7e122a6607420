package main

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/demux/serve"
)

// The slow-handler scenario times the replies of one table socket while
// the handler of another socket on the same port is in a long call: what
// one socket's slowness costs the others.

// slowCall is how long the slow handler's call lasts.
const slowCall = 300 * time.Millisecond

// slowRounds is how many slow calls the scenario times a reply beside.
var slowRounds = byRun[int]{3, 15}

// slowAdded is the goal: the most a slow call may add to another
// socket's reply.
const slowAdded = time.Millisecond

func (r *runner) slowHandler() {
	rounds := slowRounds.at(r.c.quick)
	r.printf("Two table sockets on one port through `demux/serve` (default options): one on 127.0.0.2 whose handler "+
		"sleeps %s, one on 127.0.0.3 whose handler replies at once. *Alone*: the round trip of a query to the quick "+
		"socket while the slow one is idle (the median of 50). *Beside a slow call*: %s, a query to the slow socket, "+
		"then, as soon as its call has begun, one to the quick socket, timed from its send to its reply; the "+
		"reader in the slow call hands its work to another between one and two of the server's looks (every 250 µs). "+
		"*Added* is a round trip beside a slow call less the median alone.\n\n", slowCall, times(rounds))
	alone, beside, err := slowHandlerRun(rounds)
	if err != nil {
		r.fail("slow-handler: %v", err)
		return
	}
	base := median(alone)
	added := make([]float64, len(beside))
	for i, b := range beside {
		added[i] = b - base
	}
	slices.Sort(added)
	t := newTable("quick socket's round trip", "median", "worst")
	t.add("alone", fmtNs(base), fmtNs(slices.Max(alone)))
	t.add("beside a slow call", fmtNs(median(slices.Clone(beside))), fmtNs(slices.Max(beside)))
	t.add("added", fmtNs(median(slices.Clone(added))), fmtNs(added[len(added)-1]))
	r.set(key{scen: scSlowHandler, m: medianNs}, median(slices.Clone(added)))
	r.set(key{scen: scSlowHandler, m: worstNs}, added[len(added)-1])
	r.printf("%s\n", t)
}

func (r *runner) slowHandlerGoals() []goal {
	return []goal{
		limit(fmt.Sprintf("Slow handler: a %s call on one socket adds at most %s to another socket's reply on the same port (median of the rounds)",
			slowCall, slowAdded), []place{{"", r.val(key{scen: scSlowHandler, m: medianNs})}}, true, float64(slowAdded.Nanoseconds()), fmtNs),
		limit(fmt.Sprintf("Slow handler: a %s call on one socket adds at most %s to another socket's reply on the same port (worst round)",
			slowCall, slowAdded), []place{{"", r.val(key{scen: scSlowHandler, m: worstNs})}}, true, float64(slowAdded.Nanoseconds()), fmtNs),
	}
}

// slowHandlerRun returns the quick socket's round trips alone and beside
// each of rounds slow calls, in ns.
func slowHandlerRun(rounds int) (alone, beside []float64, err error) {
	began := make(chan struct{}, 1)
	srv, err := serve.New[string](demux.Config{}, func(r *serve.Request[string]) {
		if r.Value == "slow" {
			began <- struct{}{}
			time.Sleep(slowCall)
		}
		_ = r.Reply(r.Payload)
	}, serve.Options{IPv4Only: true})
	if err != nil {
		return nil, nil, err
	}
	defer srv.Close()
	slow, err := srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.2")}, "slow")
	if err != nil {
		return nil, nil, err
	}
	quick, err := srv.Table().Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.3"), Port: slow.Options().Port}, "quick")
	if err != nil {
		return nil, nil, err
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	buf := make([]byte, 64)
	ask := func(to netip.AddrPort) (time.Duration, error) {
		start := time.Now()
		if _, err := c.WriteToUDPAddrPort([]byte("q"), to); err != nil {
			return 0, err
		}
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return 0, err
		}
		for {
			_, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return 0, err
			}
			if from == to {
				return time.Since(start), nil
			}
			// The slow socket's reply to an earlier round: not this one.
		}
	}
	for range 50 {
		d, err := ask(quick.LocalAddr())
		if err != nil {
			return nil, nil, err
		}
		alone = append(alone, float64(d.Nanoseconds()))
	}
	for range rounds {
		if _, err := c.WriteToUDPAddrPort([]byte("s"), slow.LocalAddr()); err != nil {
			return nil, nil, err
		}
		select {
		case <-began:
		case <-time.After(5 * time.Second):
			return nil, nil, fmt.Errorf("the slow handler was not called")
		}
		d, err := ask(quick.LocalAddr())
		if err != nil {
			return nil, nil, err
		}
		beside = append(beside, float64(d.Nanoseconds()))
		time.Sleep(slowCall) // the slow call ends, and its reply is read with the next round's
	}
	return alone, beside, nil
}
