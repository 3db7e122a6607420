package lookup

import (
	"net/netip"
	"testing"
)

func BenchmarkAddr16Of(b *testing.B) {
	a := netip.MustParseAddr("192.0.2.1")
	var s uint64
	for b.Loop() {
		s += Addr16Of(a).Lo
	}
	_ = s
}
