//go:build linux

package conformance

import (
	"fmt"
	"slices"
)

// The classifier decides, for each step, which documented behaviour
// explains the kernel's answer. The kernel model answers the step once with
// every kernel feature, once without the features udpdemux leaves out on
// purpose (the deliberate differences: udpdemux's rule), and once with each
// feature switched off in turn. Binds (whose answer is an errno) and
// datagrams (whose answer is a set of receivers) share it.

// verdict is the classification of one step.
type verdict[T any] struct {
	kernel T // the model's answer with every feature: what the kernel must say
	rule   T // the answer without the excused features: what the table must say
	// deliberate reports whether kernel and rule differ: the step is one
	// of the deliberate differences.
	deliberate bool
	// matters holds the features that, switched off alone, change kernel.
	matters feature
	// kinds holds, for a deliberate step, the excused features among
	// matters: the differences that make it.
	kinds feature
}

// classify classifies a step; answer gives the model's answer with the
// features on, and equal compares two answers.
func classify[T any](excuse feature, answer func(on feature) T, equal func(a, b T) bool) verdict[T] {
	v := verdict[T]{kernel: answer(featAll), rule: answer(featAll &^ excuse)}
	v.deliberate = !equal(v.kernel, v.rule)
	for _, f := range featureNames {
		if !equal(answer(featAll&^f.f), v.kernel) {
			v.matters |= f.f
		}
	}
	if v.deliberate {
		v.kinds = v.matters & excuse
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

// kindName names the features that make a deliberate step; "combined" when
// no single one does, only several together.
func kindName(f feature) string {
	if f == 0 {
		return "combined"
	}
	return f.String()
}

// explained formats what explain found, for a failure message.
func explained(f feature) string {
	if f == 0 {
		return " [no modelled kernel feature explains it]"
	}
	return fmt.Sprintf(" [the table acts as if the kernel had no %v]", f)
}
