package demuxtest

import (
	"errors"
	"slices"
	"time"
)

// without returns ops without those at the given indexes, renumbering
// connect and close references and dropping those whose bind is gone.
func without(ops []Op, drop func(i int) bool) []Op {
	newIdx := map[int]int{}
	var out []Op
	for i, o := range ops {
		if drop(i) {
			continue
		}
		if o.Kind.hasRef() {
			ni, ok := newIdx[o.Ref]
			if !ok {
				continue
			}
			o.Ref = ni
		}
		newIdx[i] = len(out)
		out = append(out, o)
	}
	return out
}

// Shrink looks for a shorter sequence that fails with the same kind of
// mismatch at its last op, by removing ops, within a time budget. Replays
// may choose other bind(0) ports; only sequences that still fail count.
func Shrink(c Config, seed uint64, ops []Op, kind string) []Op {
	fails := func(cand []Op) bool {
		at, err := Run(c, seed, cand)
		var mm *Mismatch
		return errors.As(err, &mm) && mm.Kind == kind && at == len(cand)-1
	}
	deadline := time.Now().Add(15 * time.Second)
	// Replay the table's bind(0) choices as explicit binds.
	fixed := slices.Clone(ops)
	for i := range len(fixed) - 1 {
		if fixed[i].Kind == Bind && fixed[i].Opts.Port == 0 && fixed[i].Port0 != 0 {
			fixed[i].Opts.Port = fixed[i].Port0
		}
	}
	if fails(fixed) {
		ops = fixed
	}
	// Whole kinds of ops first: most are lookups that change nothing.
	for _, k := range []Kind{Lookup, Multicast, Close, Connect, Disconnect, SetDevice} {
		last := len(ops) - 1
		cand := without(ops, func(i int) bool { return i != last && ops[i].Kind == k })
		if len(cand) < len(ops) && fails(cand) {
			ops = cand
		}
	}
	return Minimize(ops, without, fails, func() bool { return time.Now().Before(deadline) })
}

// Minimize removes elements from seq, a sequence that fails at its last
// element, for as long as fails reports that what is left still does so,
// and returns the shortest sequence it found. It tries runs of elements,
// the longest first, then runs half as long, down to single elements,
// which it tries until none can go or more reports false. The last
// element always stays. drop returns seq without the elements whose
// indexes gone reports, updating what the others refer to; nil drops them
// and changes nothing else, for elements that refer to none.
func Minimize[T any](seq []T, drop func(seq []T, gone func(i int) bool) []T, fails func([]T) bool, more func() bool) []T {
	if drop == nil {
		drop = func(seq []T, gone func(i int) bool) []T {
			var out []T
			for i, x := range seq {
				if !gone(i) {
					out = append(out, x)
				}
			}
			return out
		}
	}
	try := func(gone func(i int) bool) bool {
		last := len(seq) - 1
		cand := drop(seq, func(i int) bool { return i != last && gone(i) })
		if len(cand) < len(seq) && fails(cand) {
			seq = cand
			return true
		}
		return false
	}
	for chunk := len(seq) / 2; chunk >= 1 && more(); {
		removed := false
		for i := len(seq) - 1 - chunk; i >= 0 && more(); i -= chunk {
			lo := i
			if try(func(j int) bool { return j >= lo && j < lo+chunk }) {
				removed = true
			}
		}
		if !removed {
			chunk /= 2
		} else if chunk > len(seq)/2 {
			chunk = len(seq) / 2
		}
	}
	return seq
}
