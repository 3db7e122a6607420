package demuxtest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/go-cmp/cmp"
	"github.com/udpdemux/udpdemux/demux"
	"github.com/udpdemux/udpdemux/internal/model"
)

// Runner executes a sequence on a table and a model.
type Runner struct {
	tbl *demux.Table[int]
	m   *model.Model
	// ids maps the index of a successful bind op to the model's id.
	ids map[int]int
	// socks maps a model id to the table's socket; the table's value is
	// the model id too.
	socks map[int]*demux.Socket[int]
	// open holds the table sockets not yet closed, by model id.
	open map[int]*demux.Socket[int]
	// bindOp maps a model id to the index of its bind op.
	bindOp map[int]int
	// snapshot compares the sockets' addresses and options after every
	// write; verify calls Verify.
	snapshot, verify bool
	// chosen is the port of the last successful bind(0).
	chosen uint16
	// seen counts the kinds of answers the model gave, to check that the
	// generator reaches them.
	seen map[string]int
}

// NewRunner returns a runner on an empty table of configuration c, whose
// SO_REUSEPORT flow hash is seeded from seed, and an empty model. The
// table gets the model's ephemeral range, which the generator's ports are
// chosen around, and counts its paths, so that a test can check that each
// strategy ran the ones it is there for.
func NewRunner(c Config, seed uint64) (*Runner, error) {
	cfg := c.Table
	cfg.Rand = rand.NewPCG(seed, 0x5eed)
	cfg.PortLow, cfg.PortHigh, cfg.ReservedPorts = portLow, portHigh, []uint16{portReserved}
	cfg.CountPaths = true
	tbl, err := demux.New[int](cfg)
	if err != nil {
		return nil, err
	}
	m := model.New(model.Config{
		PortLow: portLow, PortHigh: portHigh, ReservedPorts: []uint16{portReserved},
		// Only the index algorithm prefers an unused port; Linux's
		// bitmap walk need not.
		PreferUnused:   cfg.Ephemeral == demux.EphemeralIndex,
		ReusePortIndex: tbl.ReusePortIndex,
	})
	return &Runner{tbl: tbl, m: m, ids: map[int]int{}, socks: map[int]*demux.Socket[int]{}, open: map[int]*demux.Socket[int]{}, bindOp: map[int]int{}, snapshot: !c.SkipSnapshot, verify: !c.SkipVerify, seen: map[string]int{}}, nil
}

// Table returns the table under test.
func (r *Runner) Table() *demux.Table[int] { return r.tbl }

// Model returns the reference model.
func (r *Runner) Model() *model.Model { return r.m }

// Step runs op i of a sequence on both and compares; the error is a
// *Mismatch unless the table could not be built.
func (r *Runner) Step(i int, o Op) error {
	switch o.Kind {
	case Bind:
		s, err := r.tbl.Bind(o.Opts, len(r.socks))
		mo := model.Options(o.Opts)
		var id int
		var merr error
		if o.Opts.Port != 0 {
			id, merr = r.m.Bind(mo)
			r.seen["bind "+ErrnoName(Errno(merr))]++
			if Errno(err) != Errno(merr) {
				return mismatchf("bind", "table %s (%v), model %s (%v)", ErrnoName(Errno(err)), err, ErrnoName(Errno(merr)), merr)
			}
		} else if err != nil {
			merr = r.m.EphemeralError(mo)
			r.seen["bind(0) "+ErrnoName(Errno(merr))]++
			if Errno(err) != Errno(merr) {
				return mismatchf("bind0-fail", "table %s (%v), model %s (%v)", ErrnoName(Errno(err)), err, ErrnoName(Errno(merr)), merr)
			}
		} else {
			port := s.LocalAddr().Port()
			r.chosen = port
			if cerr := r.m.CheckEphemeral(mo, port); cerr != nil {
				return mismatchf("bind0-port", "table chose port %d: %v", port, cerr)
			}
			id, merr = r.m.BindAt(mo, port)
			r.seen["bind(0) ok"]++
			if merr != nil {
				return mismatchf("bind0-port", "model cannot bind port %d: %v", port, merr)
			}
		}
		if err != nil {
			return nil
		}
		if id != len(r.socks) {
			return mismatchf("internal", "model id %d, want %d", id, len(r.socks))
		}
		r.ids[i] = id
		r.socks[id] = s
		r.open[id] = s
		r.bindOp[id] = i
	case Connect, Close, Disconnect, SetDevice:
		id, ok := r.ids[o.Ref]
		if !ok {
			return nil // its bind failed or was shrunk away
		}
		s := r.socks[id]
		wasConnected := s.Connected()
		var err, merr error
		switch o.Kind {
		case Connect:
			err, merr = r.tbl.Connect(s, o.Remote, o.Local), r.m.Connect(id, o.Remote, o.Local)
		case Disconnect:
			err, merr = r.tbl.Disconnect(s), r.m.Disconnect(id)
		case SetDevice:
			err, merr = r.tbl.SetDevice(s, o.Ifindex), r.m.SetDevice(id, o.Ifindex)
		default:
			err, merr = r.tbl.Close(s), r.m.Close(id)
			if err == nil {
				delete(r.open, id)
			}
		}
		kind := map[Kind]string{Connect: "connect", Close: "close", Disconnect: "disconnect", SetDevice: "setdevice"}[o.Kind]
		r.seen[kind+" "+ErrnoName(Errno(merr))]++
		if merr == nil && o.Kind == Connect && o.Local.IsValid() && o.Local.Unmap().IsUnspecified() {
			r.seen["connect kept wildcard"]++
		}
		if merr == nil && o.Kind == Disconnect && wasConnected && s.Options().Addr.IsUnspecified() {
			r.seen["disconnect restored wildcard"]++
		}
		if Errno(err) != Errno(merr) {
			return mismatchf(kind, "table %s (%v), model %s (%v)", ErrnoName(Errno(err)), err, ErrnoName(Errno(merr)), merr)
		}
	case Lookup:
		s, v := r.tbl.Lookup(o.Src, o.Dst, o.Ifindex)
		got := -1
		if s != nil {
			got = v
			if r.socks[v] != s {
				return mismatchf("lookup", "value %d is not the socket's", v)
			}
		}
		want := -1
		if id, ok := r.m.Lookup(o.Src, o.Dst, o.Ifindex); ok {
			want = id
			r.seen["lookup hit"]++
			for _, s := range r.m.Snapshot() {
				switch {
				case s.ID != id:
				case s.Remote.IsValid():
					r.seen["lookup hit connected"]++
				case s.ReusePort:
					r.seen["lookup hit ReusePort"]++
				case s.Local.Addr().Unmap().IsUnspecified():
					r.seen["lookup hit wildcard"]++
				}
			}
		} else {
			r.seen["lookup miss"]++
		}
		if got != want {
			return mismatchf("lookup", "table socket %d, model socket %d (-1: none)\n%s", got, want, r.describe(got, want))
		}
	case Multicast:
		var got []int
		r.tbl.LookupMulticast(o.Src, o.Dst, o.Ifindex, func(s *demux.Socket[int], v int) bool {
			got = append(got, v)
			return true
		})
		slices.Sort(got)
		want := r.m.Receivers(o.Src, o.Dst, o.Ifindex)
		if len(want) > 1 {
			r.seen["multicast several"]++
		}
		if d := cmp.Diff(want, got); d != "" {
			return mismatchf("multicast", "receivers (-model +table):\n%s%s", d, r.describe())
		}
	}
	if o.Kind == Lookup || o.Kind == Multicast {
		return nil // lookups change nothing
	}
	if r.verify {
		if err := r.tbl.Verify(); err != nil {
			return mismatchf("verify", "%v", err)
		}
	}
	if r.tbl.Len() != r.m.Len() {
		return mismatchf("len", "table %d, model %d", r.tbl.Len(), r.m.Len())
	}
	if want, got := r.m.Snapshot(), r.tableSnapshot(); r.snapshot && !slices.Equal(want, got) {
		d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }))
		return mismatchf("snapshot", "sockets (-model +table):\n%s", d)
	}
	return nil
}

// tableSnapshot describes the table's open sockets the way the model does.
// Zones are dropped: the model keeps the interface in Device.
func (r *Runner) tableSnapshot() []model.Socket {
	out := []model.Socket{}
	for id, s := range r.open {
		if s.Closed() {
			continue
		}
		o := s.Options()
		l := s.LocalAddr()
		out = append(out, model.Socket{
			ID:        id,
			Local:     netip.AddrPortFrom(l.Addr().WithZone(""), l.Port()),
			Remote:    netip.AddrPortFrom(s.RemoteAddr().Addr().WithZone(""), s.RemoteAddr().Port()),
			ReuseAddr: o.ReuseAddr,
			ReusePort: o.ReusePort,
			Owner:     o.Owner,
			Device:    o.Device,
			V6Only:    o.V6Only,
		})
	}
	slices.SortFunc(out, func(a, b model.Socket) int { return a.ID - b.ID })
	return out
}

// describe lists the model's sockets, marking the given ids, for messages.
func (r *Runner) describe(mark ...int) string {
	var b strings.Builder
	b.WriteString("model sockets, by id:\n")
	for _, s := range r.m.Snapshot() {
		tag := " "
		if slices.Contains(mark, s.ID) {
			tag = "*"
		}
		fmt.Fprintf(&b, " %s%d: %+v\n", tag, s.ID, s)
	}
	return b.String()
}

// Run executes ops on a fresh table and model and returns the first
// mismatch, with the index of its op.
func Run(c Config, seed uint64, ops []Op) (int, error) {
	r, err := NewRunner(c, seed)
	if err != nil {
		return -1, err
	}
	for i, o := range ops {
		if err := r.Step(i, o); err != nil {
			return i, err
		}
	}
	return -1, nil
}

// Unseen returns the kinds of answers that a long random run must reach,
// or it proves little, and that the model has not given yet.
func (r *Runner) Unseen() []string {
	var out []string
	for _, want := range []string{
		"bind ok", "bind EADDRINUSE", "bind EINVAL",
		"bind(0) ok", "bind(0) EADDRINUSE", "bind(0) EINVAL",
		"connect ok", "connect EINVAL", "connect EAFNOSUPPORT", "connect ENETUNREACH", "connect EBADF",
		"disconnect ok", "setdevice ok",
		"close ok", "close EBADF",
		"lookup hit", "lookup hit wildcard", "lookup hit ReusePort", "lookup hit connected",
		"lookup miss", "multicast several",
	} {
		if r.seen[want] == 0 {
			out = append(out, want)
		}
	}
	return out
}

// Seen returns how often the model gave each kind of answer.
func (r *Runner) Seen() map[string]int { return maps.Clone(r.seen) }
