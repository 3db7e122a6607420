package demux_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/udpdemux/udpdemux/demux"
)

// reusePortTable binds an SO_REUSEPORT group of n IPv4 wildcard sockets on
// port 443, and returns the flows (distinct source ports) to look up.
func reusePortTable(b testing.TB, n int) (*demux.Table[int], []*demux.Socket[int], []netip.AddrPort) {
	t, err := demux.New[int](demux.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var ss []*demux.Socket[int]
	for i := range n {
		s, err := t.Bind(demux.Options{Addr: netip.IPv4Unspecified(), Port: 443, ReusePort: true}, i)
		if err != nil {
			b.Fatal(err)
		}
		ss = append(ss, s)
	}
	srcs := make([]netip.AddrPort, 1024)
	for i := range srcs {
		srcs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), uint16(10000+i))
	}
	return t, ss, srcs
}

func benchGroupLookups(b *testing.B, t *demux.Table[int], srcs []netip.AddrPort) {
	dst := netip.MustParseAddrPort("10.0.0.1:443")
	b.ReportAllocs()
	b.ResetTimer()
	miss := 0
	for i := 0; b.Loop(); i++ {
		if s, _ := t.Lookup(srcs[i%len(srcs)], dst, 1); s == nil {
			miss++
		}
	}
	if miss > 0 {
		b.Fatalf("%d lookups found no socket", miss)
	}
}

// BenchmarkLookupReusePort measures a lookup that ends in an SO_REUSEPORT
// group's member choice.
func BenchmarkLookupReusePort(b *testing.B) {
	for _, n := range []int{8, 64} {
		for _, sel := range []struct {
			name string
			sel  demux.Selector[int]
		}{
			{"flowhash", nil},
			{"selector", func(d demux.Datagram, _ uint32, m demux.Members[int]) int { return int(d.Src.Port()) % m.Len() }},
			{"rendezvous", demux.Rendezvous[int](nil)},
		} {
			b.Run(fmt.Sprintf("%s-%d", sel.name, n), func(b *testing.B) {
				t, ss, srcs := reusePortTable(b, n)
				if sel.sel != nil {
					g, _ := ss[0].Group()
					g.SetSelector(sel.sel)
				}
				benchGroupLookups(b, t, srcs)
			})
		}
	}
}
