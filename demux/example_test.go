package demux_test

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/udpdemux/udpdemux/demux"
)

func Example() {
	t, err := demux.New[string](demux.Config{})
	if err != nil {
		panic(err)
	}
	any4 := netip.MustParseAddr("0.0.0.0")
	lo := netip.MustParseAddr("127.0.0.1")
	if _, err := t.Bind(demux.Options{Addr: any4, Port: 53}, "wildcard"); err != nil {
		panic(err)
	}
	if _, err := t.Bind(demux.Options{Addr: lo, Port: 53, ReuseAddr: true}, "loopback"); err != nil {
		fmt.Println("second bind:", errors.Is(err, syscall.EADDRINUSE))
	}
	client := netip.MustParseAddrPort("192.0.2.7:40000")
	s, v := t.Lookup(client, netip.AddrPortFrom(lo, 53), 1)
	fmt.Println(v, s.LocalAddr())
	// Output:
	// second bind: true
	// wildcard 0.0.0.0:53
}

func ExampleTable_Bind_ephemeral() {
	t, _ := demux.New[int](demux.Config{PortLow: 50000, PortHigh: 50009})
	s, err := t.Bind(demux.Options{Addr: netip.MustParseAddr("::")}, 1)
	if err != nil {
		panic(err)
	}
	p := s.LocalAddr().Port()
	fmt.Println(p >= 50000 && p <= 50009)
	// Output: true
}

func ExampleTable_Connect() {
	t, _ := demux.New[string](demux.Config{})
	srv, _ := t.Bind(demux.Options{Addr: netip.MustParseAddr("127.0.0.1"), Port: 4433, ReuseAddr: true}, "listener")
	peer := netip.MustParseAddrPort("127.0.0.9:5000")
	// A wildcard socket connects: routing chose 127.0.0.1 as its source.
	c, _ := t.Bind(demux.Options{Addr: netip.MustParseAddr("0.0.0.0"), Port: 4433, ReuseAddr: true}, "flow")
	if err := t.Connect(c, peer, netip.MustParseAddr("127.0.0.1")); err != nil {
		panic(err)
	}
	_, v := t.Lookup(peer, netip.MustParseAddrPort("127.0.0.1:4433"), 1)
	fmt.Println(v)
	_, v = t.Lookup(netip.MustParseAddrPort("127.0.0.8:5000"), netip.MustParseAddrPort("127.0.0.1:4433"), 1)
	fmt.Println(v, srv.LocalAddr())
	// Output:
	// flow
	// listener 127.0.0.1:4433
}

func ExampleTable_LookupMulticast() {
	t, _ := demux.New[string](demux.Config{})
	for _, name := range []string{"a", "b"} {
		t.Bind(demux.Options{Addr: netip.MustParseAddr("0.0.0.0"), Port: 5353, ReuseAddr: true}, name)
	}
	t.LookupMulticast(netip.MustParseAddrPort("192.0.2.1:5353"), netip.MustParseAddrPort("224.0.0.251:5353"), 1,
		func(s *demux.Socket[string], v string) bool {
			fmt.Println(v)
			return true
		})
	// Unordered output:
	// a
	// b
}

func ExampleNew_badConfig() {
	_, err := demux.New[int](demux.Config{Slots: 1000})
	fmt.Println(errors.Is(err, syscall.EINVAL))
	// Output: true
}

func ExampleTable_Stats() {
	t, _ := demux.New[int](demux.Config{Slots: 256, CountPaths: true})
	for i := range 20 {
		t.Bind(demux.Options{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Port: 53}, i)
	}
	// 20 sockets on one port: the hybrid rule searches the secondary table.
	t.Lookup(netip.MustParseAddrPort("192.0.2.1:9"), netip.MustParseAddrPort("10.0.0.7:53"), 1)
	st := t.Stats()
	fmt.Println(st.Sockets, st.Primary.Longest, st.Lookups.Secondary)
	// Output: 20 20 1
}

func ExampleTable_Verify() {
	t, _ := demux.New[int](demux.Config{})
	s, _ := t.Bind(demux.Options{Addr: netip.MustParseAddr("::"), Port: 443, ReusePort: true}, 1)
	t.Close(s)
	fmt.Println(t.Verify(), t.Len())
	// Output: <nil> 0
}

func ExampleGroup_SetSelector() {
	t, _ := demux.New[string](demux.Config{})
	any4 := netip.MustParseAddr("0.0.0.0")
	var workers []*demux.Socket[string]
	for _, name := range []string{"w0", "w1", "w2"} {
		s, _ := t.Bind(demux.Options{Addr: any4, Port: 443, ReusePort: true}, name)
		workers = append(workers, s)
	}
	g, _ := workers[0].Group()
	fmt.Println("members:", g.Members().Len())
	// Steer by the datagram's addressing: here the source port picks the
	// worker; port 0 declines, and the flow hash picks.
	// (ExampleTable_LookupDatagram steers by the payload.)
	g.SetSelector(func(d demux.Datagram, hash uint32, m demux.Members[string]) int {
		if d.Src.Port() == 0 {
			return -1
		}
		return int(d.Src.Port()) % m.Len()
	})
	_, v := t.Lookup(netip.MustParseAddrPort("192.0.2.1:4001"), netip.MustParseAddrPort("10.0.0.1:443"), 1)
	fmt.Println(v)
	// Output:
	// members: 3
	// w2
}

func ExampleRendezvous() {
	t, _ := demux.New[int](demux.Config{})
	any4 := netip.MustParseAddr("0.0.0.0")
	first, _ := t.Bind(demux.Options{Addr: any4, Port: 443, ReusePort: true}, 0)
	for w := 1; w < 4; w++ {
		t.Bind(demux.Options{Addr: any4, Port: 443, ReusePort: true}, w)
	}
	// Keep each flow on its worker when workers come and go; the worker
	// number in the socket's value names the member.
	g, _ := first.Group()
	g.SetSelector(demux.Rendezvous(func(s *demux.Socket[int]) uint64 { return uint64(s.Value()) }))
	src, dst := netip.MustParseAddrPort("192.0.2.1:4001"), netip.MustParseAddrPort("10.0.0.1:443")
	before, _ := t.Lookup(src, dst, 1)
	t.Bind(demux.Options{Addr: any4, Port: 443, ReusePort: true}, 4)
	after, _ := t.Lookup(src, dst, 1)
	fmt.Println(before == after || after.Value() == 4)
	// Output: true
}

func ExampleSocket_Disconnect() {
	t, _ := demux.New[string](demux.Config{})
	s, _ := t.Bind(demux.Options{Addr: netip.MustParseAddr("0.0.0.0"), Port: 5353}, "s")
	// Routing chose 127.0.0.1 as the source for this peer.
	if err := s.Connect(netip.MustParseAddrPort("127.0.0.9:5000"), netip.MustParseAddr("127.0.0.1")); err != nil {
		panic(err)
	}
	fmt.Println(s.LocalAddr(), s.RemoteAddr())
	if err := s.Disconnect(); err != nil {
		panic(err)
	}
	_, v := t.Lookup(netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("10.0.0.1:5353"), 1)
	fmt.Println(s.LocalAddr(), s.Connected(), v)
	// Output:
	// 127.0.0.1:5353 127.0.0.9:5000
	// 0.0.0.0:5353 false s
}

func ExampleTable_Multicast() {
	t, _ := demux.New[string](demux.Config{})
	for _, name := range []string{"a", "b"} {
		t.Bind(demux.Options{Addr: netip.MustParseAddr("0.0.0.0"), Port: 5353, ReuseAddr: true}, name)
	}
	src, group := netip.MustParseAddrPort("192.0.2.1:5353"), netip.MustParseAddrPort("224.0.0.251:5353")
	n := 0
	for s, v := range t.Multicast(src, group, 1) {
		// A real receiver would check that s joined the group first.
		_ = s
		_ = v
		n++
	}
	fmt.Println(n, "receivers")
	// Output: 2 receivers
}

func ExampleSocket_SetDevice() {
	t, _ := demux.New[string](demux.Config{})
	s, _ := t.Bind(demux.Options{Addr: netip.MustParseAddr("0.0.0.0"), Port: 5353}, "s")
	src, dst := netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("10.0.0.1:5353")
	// SO_BINDTODEVICE after bind: only datagrams arriving on interface 2.
	if err := s.SetDevice(2); err != nil {
		panic(err)
	}
	on1, _ := t.Lookup(src, dst, 1)
	on2, _ := t.Lookup(src, dst, 2)
	fmt.Println(on1 != nil, on2 != nil)
	// Output: false true
}

func ExampleConfig_isLocal() {
	host := netip.MustParsePrefix("10.0.0.1/32")
	t, _ := demux.New[string](demux.Config{
		IsLocal: func(a netip.Addr, device int) bool { return host.Contains(a) || a.IsLoopback() },
	})
	_, err := t.Bind(demux.Options{Addr: netip.MustParseAddr("10.0.0.2"), Port: 53}, "")
	fmt.Println(errors.Is(err, syscall.EADDRNOTAVAIL))
	_, err = t.Bind(demux.Options{Addr: netip.MustParseAddr("10.0.0.1"), Port: 53}, "")
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}

func ExampleTable_LookupBatch() {
	t, _ := demux.New[string](demux.Config{})
	dns := netip.MustParseAddr("10.0.0.53")
	if _, err := t.Bind(demux.Options{Addr: dns, Port: 53}, "resolver"); err != nil {
		panic(err)
	}
	if _, err := t.Bind(demux.Options{Addr: netip.MustParseAddr("::"), Port: 443}, "quic"); err != nil {
		panic(err)
	}
	// The addressing of one recvmmsg batch.
	batch := []demux.Datagram{
		{Src: netip.MustParseAddrPort("192.0.2.1:3000"), Dst: netip.AddrPortFrom(dns, 53), Ifindex: 1},
		{Src: netip.MustParseAddrPort("[2001:db8::1]:4000"), Dst: netip.MustParseAddrPort("[2001:db8::443]:443"), Ifindex: 1},
		{Src: netip.MustParseAddrPort("192.0.2.2:3000"), Dst: netip.AddrPortFrom(dns, 54), Ifindex: 1},
	}
	out := make([]*demux.Socket[string], len(batch))
	n := t.LookupBatch(batch, out)
	for _, s := range out[:n] {
		if s == nil {
			fmt.Println("no socket")
			continue
		}
		fmt.Println(s.Value(), s.LocalAddr())
	}
	// Output:
	// resolver 10.0.0.53:53
	// quic [::]:443
	// no socket
}
