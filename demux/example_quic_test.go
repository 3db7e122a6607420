package demux_test

import (
	"fmt"
	"net/netip"

	"github.com/udpdemux/udpdemux/demux"
)

// quicWorker returns the worker that a QUIC datagram's destination
// connection ID names, or -1. The servers issue connection IDs of
// cidLen bytes whose first byte is their worker number, so that every
// datagram of a connection reaches the worker that holds its state, even
// after the client's address changes (which the flow hash cannot follow).
func quicWorker(p []byte, workers int) int {
	const cidLen = 8
	var cid []byte
	switch {
	case len(p) > 0 && p[0]&0x80 == 0: // short header: the ID follows the first byte
		if len(p) < 1+cidLen {
			return -1
		}
		cid = p[1 : 1+cidLen]
	case len(p) >= 6: // long header: version (4 bytes), ID length, ID
		l := int(p[5])
		if l == 0 || len(p) < 6+l {
			return -1
		}
		cid = p[6 : 6+l]
	default:
		return -1
	}
	if w := int(cid[0]); w < workers {
		return w
	}
	// A client's first Initial carries an ID the client chose at random:
	// decline, and the flow hash picks the worker that will then issue
	// IDs naming itself.
	return -1
}

// A QUIC server with a worker per SO_REUSEPORT socket steers each
// datagram by its destination connection ID, as an eBPF reuseport program
// does in Linux.
func ExampleTable_LookupDatagram() {
	t, _ := demux.New[string](demux.Config{})
	any4 := netip.MustParseAddr("0.0.0.0")
	var workers []*demux.Socket[string]
	for _, name := range []string{"w0", "w1", "w2"} {
		s, _ := t.Bind(demux.Options{Addr: any4, Port: 443, ReusePort: true}, name)
		workers = append(workers, s)
	}
	g, _ := workers[0].Group()
	g.SetSelector(func(d demux.Datagram, _ uint32, m demux.Members[string]) int {
		return quicWorker(d.Payload, m.Len())
	})
	dst := netip.MustParseAddrPort("10.0.0.1:443")
	// A 1-RTT packet for a connection whose ID w2 issued: 0x02 first.
	short := []byte{0x40, 0x02, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xee}
	for _, src := range []string{"192.0.2.1:4001", "198.51.100.7:5555"} { // the client moved
		_, v := t.LookupDatagram(demux.Datagram{
			Src: netip.MustParseAddrPort(src), Dst: dst, Ifindex: 1, Payload: short,
		})
		fmt.Println(src, "→", v)
	}
	// A Handshake packet (long header) for an ID that w1 issued.
	long := []byte{0xe0, 0, 0, 0, 1, 8, 0x01, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0x00}
	_, v := t.LookupDatagram(demux.Datagram{Src: netip.MustParseAddrPort("192.0.2.1:4001"), Dst: dst, Payload: long})
	fmt.Println("handshake →", v)
	// Output:
	// 192.0.2.1:4001 → w2
	// 198.51.100.7:5555 → w2
	// handshake → w1
}
