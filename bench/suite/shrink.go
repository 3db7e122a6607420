package suite

import (
	"fmt"
	"runtime"

	"github.com/udpdemux/udpdemux/demux"
)

// ShrinkHeap measures what a table of the default Config keeps after it
// shrinks: the growth of the live heap for a table that held n sockets of
// the same-port shape and closed all but the first keep, and for one that
// only ever held those keep. Both tables are alive while each is measured,
// and the closed sockets' handles are dropped, as a caller that closed
// them would.
func ShrinkHeap(n, keep int, seed uint64) (shrunk, small int64, err error) {
	if keep > n {
		return 0, 0, fmt.Errorf("ShrinkHeap: keep %d of %d", keep, n)
	}
	sh := SamePort(n, 0, seed)
	build := func(socks []Sock) (*demux.Table[int32], []*demux.Socket[int32], error) {
		t, err := demux.New[int32](demux.Config{})
		if err != nil {
			return nil, nil, err
		}
		ss := make([]*demux.Socket[int32], len(socks))
		for i := range socks {
			if ss[i], err = bindDemux(t, &socks[i], int32(i)); err != nil {
				return nil, nil, err
			}
		}
		return t, ss, nil
	}
	// Two collections before each reading: sync.Pool caches and the
	// runner's earlier garbage take two to go.
	settled := func() int64 { runtime.GC(); return heapInUse() }
	base := settled()
	st, kept, err := build(sh.Socks[:keep])
	if err != nil {
		return 0, 0, err
	}
	small = settled() - base
	base = settled()
	bt, all, err := build(sh.Socks)
	if err != nil {
		return 0, 0, err
	}
	for _, s := range all[keep:] {
		if err := bt.Close(s); err != nil {
			return 0, 0, err
		}
	}
	all = append([]*demux.Socket[int32](nil), all[:keep]...)
	shrunk = settled() - base
	if err := bt.Verify(); err != nil {
		return 0, 0, err
	}
	runtime.KeepAlive(sh)
	runtime.KeepAlive(st)
	runtime.KeepAlive(kept)
	runtime.KeepAlive(all)
	return shrunk, small, nil
}
