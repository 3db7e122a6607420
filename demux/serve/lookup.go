package serve

import "github.com/udpdemux/udpdemux/demux"

// datagram is the addressing of one received datagram.
type datagram = demux.Datagram

// lookupBatch stores in out[i] the socket that receives ds[i], or nil: the
// one place that asks the table about unicast datagrams.
func lookupBatch[V any](t *demux.Table[V], ds []datagram, out []*demux.Socket[V]) {
	t.LookupBatch(ds, out)
}
