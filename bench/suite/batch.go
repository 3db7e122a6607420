package suite

import (
	"fmt"
	"testing"

	"github.com/udpdemux/udpdemux/demux"
)

// BatchSize is the number of datagrams per batch lookup: a recvmmsg-sized
// batch.
const BatchSize = 32

// BatchDatagram is the addressing of one datagram of a batch.
type BatchDatagram = demux.Datagram

// lookupBatch looks up ds in t into out: the one place that calls the
// library's batch lookup.
func lookupBatch(t *demux.Table[int32], ds []BatchDatagram, out []*demux.Socket[int32]) int {
	return t.LookupBatch(ds, out)
}

// Batcher is a fixture that can look up datagrams in batches.
type Batcher interface {
	// BenchBatch returns the benchmark that looks up the datagrams of set
	// i, BatchSize per batch, one batch per iteration.
	BenchBatch(i int) func(*testing.B)
	// CheckBatch checks the batch lookup against the shape's answers on
	// the first max datagrams of set i (all if max ≤ 0).
	CheckBatch(i, max int) error
}

// batches returns the datagrams of set i as batch datagrams, rounded down
// to whole batches (at least one).
func (f *demuxFixture) batches(i int) ([]BatchDatagram, []int32) {
	ds := f.sets[i].D
	n := max(len(ds)/BatchSize*BatchSize, BatchSize)
	bs, want := make([]BatchDatagram, n), make([]int32, n)
	for j := range bs {
		d := ds[j%len(ds)]
		bs[j], want[j] = BatchDatagram{Src: d.Src, Dst: d.Dst, Ifindex: 1}, d.Want
	}
	return bs, want
}

// BenchBatch implements Batcher.
func (f *demuxFixture) BenchBatch(i int) func(*testing.B) {
	bs, _ := f.batches(i)
	return func(b *testing.B) {
		b.ReportAllocs()
		out := make([]*demux.Socket[int32], BatchSize)
		var sum int64
		j := 0
		for b.Loop() {
			sum += int64(lookupBatch(f.t, bs[j:j+BatchSize], out))
			if j += BatchSize; j == len(bs) {
				j = 0
			}
		}
		Sink += sum
	}
}

// CheckBatch implements Batcher.
func (f *demuxFixture) CheckBatch(i, max int) error {
	bs, want := f.batches(i)
	if max > 0 && max < len(bs) {
		bs, want = bs[:(max+BatchSize-1)/BatchSize*BatchSize], want[:(max+BatchSize-1)/BatchSize*BatchSize]
	}
	out := make([]*demux.Socket[int32], BatchSize)
	for j := 0; j < len(bs); j += BatchSize {
		if n := lookupBatch(f.t, bs[j:j+BatchSize], out); n != BatchSize {
			return fmt.Errorf("batch lookup handled %d of %d datagrams", n, BatchSize)
		}
		for k, s := range out {
			d := Datagram{Want: want[j+k]}
			if s == nil || !d.accepts(s.Value()) {
				return fmt.Errorf("batch lookup %v→%v: got socket %v, want %d", bs[j+k].Src, bs[j+k].Dst, s != nil, want[j+k])
			}
		}
	}
	return nil
}

var _ Batcher = (*demuxFixture)(nil)
