//go:build linux

package conformance

import (
	"fmt"
	"slices"
	"strings"
)

// The classifier decides, for each step, which documented behaviour
// explains the kernel's answer. The kernel model answers the step once with
// the features the running kernel has (found by the probes of
// probe_linux_test.go when the test starts), once with udpdemux's rule
// (every feature but the ones udpdemux leaves out on purpose, the
// deliberate differences), and once with each feature flipped in turn.
// Binds (whose answer is an errno) and datagrams (whose answer is a set of
// receivers) share it.

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
	rule := featAll &^ excuse
	v := verdict[T]{kernel: answer(kern), rule: answer(rule)}
	v.deliberate = !equal(v.kernel, v.rule)
	for _, f := range featureNames {
		if !equal(answer(kern^f.f), v.kernel) {
			v.matters |= f.f
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
	for _, f := range featureNames {
		if excuse&f.f == 0 && fits(answer(featAll&^(excuse|f.f))) {
			expl |= f.f
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
	for _, n := range featureNames {
		switch {
		case f&n.f == 0:
		case kern&n.f == 0:
			s = append(s, "no-"+n.name)
		default:
			s = append(s, n.name)
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
