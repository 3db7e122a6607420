//go:build linux

package conformance

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/udpdemux/udpdemux/demux/demuxtest"
	"github.com/udpdemux/udpdemux/internal/model"
)

// The classifier decides, for each step, which documented behaviour
// explains the kernel's answer. The model (package internal/model, which
// the differential tests diff the table against) answers the step once with
// the features the running kernel has (found by the probes of
// probe_linux_test.go when the test starts), once with udpdemux's rule
// (every feature but the ones udpdemux leaves out on purpose, the
// deliberate differences), and once with each feature flipped in turn.
// Binds (whose answer is an errno) and datagrams (whose answer is a set of
// receivers) share it.

// feature is a set of the model's kernel features (internal/model's
// Features), which the classifier switches.
type feature = model.Features

// skipConnect46 is not a model feature but a knob for hunting: skip
// connects of an IPv6 socket that already has a specific IPv6 local
// address to a v4-mapped peer (Linux accepts them, see doConnect).
const skipConnect46 feature = 1 << 15

// each holds the model's features one by one.
var each = func() (out []feature) {
	for f := feature(1); f&model.Linux != 0; f <<= 1 {
		out = append(out, f)
	}
	return out
}()

// verdict is the classification of one step.
type verdict[T any] struct {
	kernel T // the model's answer with the kernel's features: what the kernel must say
	rule   T // the answer without the excused features: what the table must say
	// deliberate reports whether kernel and rule differ: the step is one
	// of the deliberate differences, or a behaviour that udpdemux follows
	// and this kernel lacks.
	deliberate bool
	// matters holds the features that, flipped alone, change kernel.
	matters feature
	// kinds holds, for a deliberate step, the features among matters on
	// which the kernel and udpdemux's rule disagree: the differences that
	// make it.
	kinds feature
}

// classify classifies a step for a kernel with the features kern; answer
// gives the model's answer with the features on, and equal compares two
// answers. A deliberate difference that this kernel does not show (kern
// lacks it) makes no step deliberate: there the kernel and udpdemux agree,
// and the step is compared as an ordinary one.
func classify[T any](kern, excuse feature, answer func(on feature) T, equal func(a, b T) bool) verdict[T] {
	rule := model.Linux &^ excuse
	v := verdict[T]{kernel: answer(kern), rule: answer(rule)}
	v.deliberate = !equal(v.kernel, v.rule)
	for _, f := range each {
		if !equal(answer(kern^f), v.kernel) {
			v.matters |= f
		}
	}
	if v.deliberate {
		v.kinds = v.matters & (kern ^ rule)
	}
	return v
}

// explain names the cause of a table answer that neither the kernel nor
// udpdemux's rule gives: the features, not excused, that switched off
// together with the excused ones make the model answer as fits accepts.
// The table acts as if the kernel lacked them; 0 means no modelled feature
// explains the answer.
func explain[T any](excuse feature, answer func(on feature) T, fits func(T) bool) feature {
	var expl feature
	for _, f := range each {
		if excuse&f == 0 && fits(answer(model.Linux&^(excuse|f))) {
			expl |= f
		}
	}
	return expl
}

// ruleOK reports whether a table that returned socket got, of group group,
// gave the answer want.
func ruleOK(want []int, got int, group []int) bool {
	if len(want) == 0 || got < 0 {
		return len(want) == 0 && got < 0
	}
	for _, x := range want {
		if !slices.Contains(group, x) {
			return false
		}
	}
	return true
}

// kindName names the features that make a deliberate step, those that
// udpdemux follows and the kernel lacks as "no-" and the name; "combined"
// when no single one does, only several together.
func kindName(f, kern feature) string {
	if f == 0 {
		return "combined"
	}
	var s []string
	for _, n := range each {
		switch {
		case f&n == 0:
		case kern&n == 0:
			s = append(s, "no-"+n.String())
		default:
			s = append(s, n.String())
		}
	}
	return strings.Join(s, "+")
}

// explained formats what explain found, for a failure message.
func explained(f feature) string {
	if f == 0 {
		return " [no modelled kernel feature explains it]"
	}
	return fmt.Sprintf(" [the table acts as if the kernel had no %v]", f)
}

// kmodel is the model of a scenario's kernel sockets, under the scenario's
// socket ids (which failed binds use up too; the model's do not).
type kmodel struct {
	m   *model.Model
	mid map[int]int // scenario id to model id
	ids map[int]int // model id to scenario id
}

func newModel() *kmodel {
	return &kmodel{m: model.New(model.Config{}), mid: map[int]int{}, ids: map[int]int{}}
}

func (b bindSpec) options() model.Options {
	return model.Options{Addr: b.addr, Port: b.port, ReuseAddr: b.reuseAddr, ReusePort: b.reusePort,
		Owner: b.owner, Device: b.dev, V6Only: b.v6only}
}

// check is the errno of bind b on a kernel with features on.
func (k *kmodel) check(b bindSpec, on feature) syscall.Errno {
	return demuxtest.Errno(k.m.Check(b.options(), on))
}

// insert records bind b, which the kernel and the table accepted, as
// socket id.
func (k *kmodel) insert(id int, b bindSpec) error {
	mid, err := k.m.Insert(b.options())
	k.mid[id], k.ids[mid] = mid, id
	return err
}

// bindClosed records bind b, which the kernel accepted and the table
// refused (a deliberate difference), and the close that undoes it on the
// kernel at once. The socket goes, but not all it did: a SO_REUSEPORT
// socket that joins a detached socket gives that socket a group of its own
// (Linux's reuseport_add_sock), which then outlives the newcomer.
func (k *kmodel) bindClosed(b bindSpec) error {
	mid, err := k.m.Insert(b.options())
	if err != nil {
		return err
	}
	return k.m.Close(mid)
}

// lookup returns the sorted ids of the sockets that may receive the
// datagram on a kernel with features on.
func (k *kmodel) lookup(src, dst netip.AddrPort, ifindex int, on feature) []int {
	return k.scenarioIDs(k.m.Candidates(src, dst, ifindex, on))
}

// strays returns the ids of the sockets that the kernel may find by a
// 4-tuple slot collision (model.Strays).
func (k *kmodel) strays(src, dst netip.AddrPort, ifindex int) []int {
	return k.scenarioIDs(k.m.Strays(src, dst, ifindex))
}

func (k *kmodel) connect(id int, remote netip.AddrPort, local netip.Addr) error {
	return k.m.Connect(k.mid[id], remote, local)
}

func (k *kmodel) disconnect(id int) error     { return k.m.Disconnect(k.mid[id]) }
func (k *kmodel) setDevice(id, dev int) error { return k.m.SetDevice(k.mid[id], dev) }
func (k *kmodel) close(id int) error          { return k.m.Close(k.mid[id]) }

func (k *kmodel) scenarioIDs(mids []int) []int {
	var out []int
	for _, mid := range mids {
		out = append(out, k.ids[mid])
	}
	slices.Sort(out)
	return out
}
