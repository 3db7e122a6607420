package demux_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/udpdemux/udpdemux/demux"
)

// A port watcher keeps one resource per port in use, such as a kernel
// socket; when it cannot make one, it vetoes the bind.
func ExampleConfig_onPort() {
	errBusy := errors.New("port busy on the host")
	t, _ := demux.New[string](demux.Config{OnPort: func(port uint16, inUse bool) error {
		if inUse && port == 9 {
			return errBusy
		}
		fmt.Println("port", port, "in use:", inUse)
		return nil
	}})
	any4 := netip.MustParseAddr("0.0.0.0")
	a, _ := t.Bind(demux.Options{Addr: any4, Port: 53, ReuseAddr: true}, "a")
	b, _ := t.Bind(demux.Options{Addr: any4, Port: 53, ReuseAddr: true}, "b") // no event: 53 is in use
	_, err := t.Bind(demux.Options{Addr: any4, Port: 9}, "vetoed")
	fmt.Println(errors.Is(err, errBusy), t.Len())
	_ = t.Close(a)
	_ = t.Close(b) // the last socket of port 53
	// Output:
	// port 53 in use: true
	// true 2
	// port 53 in use: false
}

func ExampleTable_Ports() {
	t, _ := demux.New[string](demux.Config{})
	for _, p := range []uint16{5353, 53, 443} {
		_, _ = t.Bind(demux.Options{Addr: netip.MustParseAddr("::"), Port: p}, "")
	}
	for p := range t.Ports() {
		fmt.Println(p)
	}
	// Output:
	// 53
	// 443
	// 5353
}

func ExampleTable_Sockets() {
	t, _ := demux.New[string](demux.Config{})
	lo := netip.MustParseAddr("127.0.0.1")
	_, _ = t.Bind(demux.Options{Addr: lo, Port: 853}, "dot")
	_, _ = t.Bind(demux.Options{Addr: lo, Port: 53, ReuseAddr: true}, "dns-a")
	_, _ = t.Bind(demux.Options{Addr: netip.MustParseAddr("0.0.0.0"), Port: 53, ReuseAddr: true}, "dns-b")
	for s := range t.Sockets() {
		fmt.Println(s.LocalAddr(), s.Value())
	}
	// Output:
	// 127.0.0.1:53 dns-a
	// 0.0.0.0:53 dns-b
	// 127.0.0.1:853 dot
}
