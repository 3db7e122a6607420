package suite

import (
	"fmt"
	"time"

	"github.com/udpdemux/udpdemux/bench/peer/gomap"
	"github.com/udpdemux/udpdemux/bench/peer/gvisor"
	"github.com/udpdemux/udpdemux/demux"
)

// Churner is a fixture that can bind (and connect) more sockets and close
// them again, to time a write at the size of its table.
type Churner interface {
	// Churn binds (and connects, if they have a peer) socks in turn, then
	// closes them in turn, and returns the time of each half.
	Churn(socks []Sock) (bind, close time.Duration, err error)
}

// Churn implements Churner.
func (f *demuxFixture) Churn(socks []Sock) (bind, close time.Duration, err error) {
	ss := make([]*demux.Socket[int32], len(socks))
	t0 := time.Now()
	for i := range socks {
		if ss[i], err = bindDemux(f.t, &socks[i], -1); err != nil {
			return 0, 0, err
		}
	}
	t1 := time.Now()
	for _, s := range ss {
		if err := f.t.Close(s); err != nil {
			return 0, 0, fmt.Errorf("close %v: %w", s.LocalAddr(), err)
		}
	}
	return t1.Sub(t0), time.Since(t1), nil
}

// Churn implements Churner: Register with the socket's 4-tuple, as
// gVisor's UDP connect does, and Unregister.
func (f *gvisorFixture) Churn(socks []Sock) (bind, close time.Duration, err error) {
	eps := make([]gvisor.Endpoint, len(socks))
	t0 := time.Now()
	for i := range socks {
		s := &socks[i]
		if err := f.d.Register(s.Key(), s.Remote, gvisor.Flags{MostRecent: s.ReuseAddr, LoadBalanced: s.ReusePort}, &eps[i]); err != nil {
			return 0, 0, err
		}
	}
	t1 := time.Now()
	for i := range socks {
		s := &socks[i]
		f.d.Unregister(s.Key(), s.Remote, gvisor.Flags{MostRecent: s.ReuseAddr, LoadBalanced: s.ReusePort}, &eps[i])
	}
	return t1.Sub(t0), time.Since(t1), nil
}

// Churn implements Churner: a map insert and delete.
func (f *mapFixture[K]) Churn(socks []Sock) (bind, close time.Duration, err error) {
	keys := make([]K, len(socks))
	for i := range socks {
		keys[i] = f.key(&socks[i])
	}
	t0 := time.Now()
	for _, k := range keys {
		f.m.Insert(k, -1)
	}
	t1 := time.Now()
	for _, k := range keys {
		f.m.Delete(k)
	}
	return t1.Sub(t0), time.Since(t1), nil
}

var (
	_ Churner = (*demuxFixture)(nil)
	_ Churner = (*gvisorFixture)(nil)
	_ Churner = (*mapFixture[gomap.Tuple])(nil)
)
