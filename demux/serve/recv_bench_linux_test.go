package serve

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/ipv4"

	"github.com/udpdemux/udpdemux/demux"
)

// BenchmarkReceive measures a reader's cost per datagram (one op): its
// recvmmsg, the control messages, the table's lookups, the handler call
// and the counts, for 512 sockets on 127.1.x.y and one port, as the
// runner's loopback scenario has them. Each round queues a number of
// datagrams on the kernel socket with the timer stopped, then reads and
// handles them with the reader's own calls; "queued" is that number. The
// reader of a busy server sees full batches (64); one that keeps up with
// its senders sees a few per read (from under 2 to about 20 in the
// runner's loopback scenario), so the cost of a read that is not full
// counts too. Wakeups
// of a reader blocked in the poller are not measured here: the loopback
// scenario has them.
func BenchmarkReceive(b *testing.B) {
	for _, queued := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) { benchReceive(b, queued) })
	}
}

func benchReceive(b *testing.B, queued int) {
	const nsocks = 512
	var got int
	s := &Server[int]{
		h:    func(r *Request[int]) { got++ },
		opts: Options{IPv4Only: true, Batch: 64, MaxDatagram: 2048},
	}
	l, err := s.listen(sockKey{addr: any4}, false)
	if err != nil {
		b.Fatal(err)
	}
	defer l.conn.Close()
	l.port = l.conn.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	if s.t, err = demux.New[int](demux.Config{}); err != nil {
		b.Fatal(err)
	}
	dsts := make([]net.Addr, nsocks)
	for i := range nsocks {
		a := netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(i%250 + 1)})
		if _, err := s.t.Bind(demux.Options{Addr: a, Port: l.port}, i); err != nil {
			b.Fatal(err)
		}
		dsts[i] = net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, l.port))
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sender := ipv4.NewPacketConn(c)
	ms := make([]ipv4.Message, queued)
	next := 0
	send := func(n int) {
		for j := range n {
			p := make([]byte, 64)
			binary.BigEndian.PutUint32(p, uint32(next))
			ms[j] = ipv4.Message{Buffers: [][]byte{p}, Addr: dsts[next]}
			next = (next + 1) % nsocks
		}
		for off := 0; off < n; {
			w, err := sender.WriteBatch(ms[off:n], 0)
			if err != nil {
				b.Fatal(err)
			}
			off += w
		}
	}
	l.take() // the reader's batch, which it keeps while reads find datagrams
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		q := min(queued, b.N-done)
		b.StopTimer()
		send(q)
		got = 0
		b.StartTimer()
		for got < q {
			bt, n, err := l.readBatch()
			if err != nil {
				b.Fatal(err)
			}
			bt.lookUp(n)
			bt.deliverRest()
		}
		done += q
	}
	b.StopTimer()
	if l.c[nUnmatched].Load() != 0 || l.c[nTruncated].Load() != 0 {
		b.Fatalf("unmatched %d, truncated %d", l.c[nUnmatched].Load(), l.c[nTruncated].Load())
	}
}
