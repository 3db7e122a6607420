package lookup

import (
	"net/netip"
	"testing"
)

func BenchmarkQueryInit(b *testing.B) {
	src := netip.MustParseAddrPort("192.0.2.1:4000")
	dst := netip.MustParseAddrPort("10.0.0.1:53")
	var sink uint32
	for b.Loop() {
		var q Query
		q.Init(src, dst, 1)
		sink += q.Dst.V4()
	}
	_ = sink
}
