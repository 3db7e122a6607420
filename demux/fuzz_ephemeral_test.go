package demux_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/internal/model"
)

// FuzzEphemeral runs bind(0) sequences, with explicit binds and closes
// between them, in a small range: every port chosen must be in the range,
// unreserved, conflict-free and — with the default algorithm — unused while
// an unused port exists (the reference model judges); every failure must be
// EADDRINUSE when the model finds no legal port; the tables stay
// consistent.
func FuzzEphemeral(f *testing.F) {
	f.Add([]byte{0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 1, 3, 2, 0, 1, 3, 1, 0, 2, 9, 0, 1, 0, 5, 1, 3, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 15, 0, 2, 3, 0, 2, 3, 0, 2, 3, 1, 0, 0, 7, 0, 0, 0, 0, 0})
	pool := []netip.Addr{
		netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("::"), netip.MustParseAddr("127.0.0.1"),
		netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::1"), netip.MustParseAddr("::ffff:127.0.0.1"),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &bytesReader{data}
		algo := demux.Ephemeral(r.byte() % 3)
		const low = 40000
		high := low + uint16(r.byte()%24)
		var reserved []uint16
		for range r.byte() % 3 {
			reserved = append(reserved, low+uint16(r.byte()%24))
		}
		tab, err := demux.New[int](demux.Config{Slots: 256, PortLow: low, PortHigh: high, ReservedPorts: reserved, Ephemeral: algo})
		if err != nil {
			t.Fatal(err)
		}
		m := model.New(model.Config{PortLow: low, PortHigh: high, ReservedPorts: reserved, PreferUnused: algo == demux.EphemeralIndex})
		type pair struct {
			s  *demux.Socket[int]
			id int
		}
		var live []pair
		for i := 0; len(r.b) > 0 && i < 200; i++ {
			op := r.byte()
			o := demux.Options{Addr: pool[int(r.byte())%len(pool)], Device: int(op>>4) % 3}
			flags := r.byte()
			o.ReuseAddr, o.ReusePort, o.V6Only = flags&1 != 0, flags&2 != 0, flags&4 != 0 && o.Addr.Is6() && !o.Addr.Is4In6()
			switch op % 4 {
			case 0, 1: // bind(0)
				s, err := tab.Bind(o, i)
				if err != nil {
					want := m.EphemeralError(model.Options(o))
					var errno syscall.Errno
					if !errors.As(want, &errno) || !errors.Is(err, errno) {
						t.Fatalf("op %d: bind(0) %+v failed with %v; model says %v", i, o, err, want)
					}
					continue
				}
				p := s.LocalAddr().Port()
				if err := m.CheckEphemeral(model.Options(o), p); err != nil {
					t.Fatalf("op %d: bind(0) %+v chose %d: %v", i, o, p, err)
				}
				id, err := m.BindAt(model.Options(o), p)
				if err != nil {
					t.Fatalf("op %d: model BindAt: %v", i, err)
				}
				live = append(live, pair{s, id})
			case 2: // explicit bind, to fill the range
				o.Port = low + uint16(r.byte()%24)
				s, err := tab.Bind(o, i)
				id, merr := m.Bind(model.Options(o))
				if (err == nil) != (merr == nil) || (err != nil && !errors.Is(err, syscall.EADDRINUSE) && !errors.Is(err, syscall.EINVAL)) {
					t.Fatalf("op %d: bind %+v: table %v, model %v", i, o, err, merr)
				}
				if err == nil {
					live = append(live, pair{s, id})
				}
			case 3: // close
				if len(live) > 0 {
					k := int(r.byte()) % len(live)
					if err := tab.Close(live[k].s); err != nil {
						t.Fatal(err)
					}
					if err := m.Close(live[k].id); err != nil {
						t.Fatal(err)
					}
					live = append(live[:k], live[k+1:]...)
				}
			}
		}
		if err := tab.Verify(); err != nil {
			t.Fatal(err)
		}
		if tab.Len() != m.Len() {
			t.Fatalf("table holds %d sockets, model %d", tab.Len(), m.Len())
		}
	})
}
