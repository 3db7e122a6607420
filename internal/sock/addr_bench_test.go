package sock

import (
	"net/netip"
	"testing"
)

func BenchmarkFrom16(b *testing.B) {
	a := netip.MustParseAddr("192.0.2.1")
	var s uint64
	for b.Loop() {
		s += From16(a).Lo
	}
	_ = s
}
