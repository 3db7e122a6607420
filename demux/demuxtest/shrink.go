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
	try := func(drop func(i int) bool) bool {
		last := len(ops) - 1
		cand := without(ops, func(i int) bool { return i != last && drop(i) })
		if len(cand) < len(ops) && fails(cand) {
			ops = cand
			return true
		}
		return false
	}
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
		try(func(i int) bool { return ops[i].Kind == k })
	}
	for chunk := len(ops) / 2; chunk >= 1 && time.Now().Before(deadline); {
		removed := false
		for i := len(ops) - 1 - chunk; i >= 0 && time.Now().Before(deadline); i -= chunk {
			lo := i
			if try(func(j int) bool { return j >= lo && j < lo+chunk }) {
				removed = true
			}
		}
		if !removed {
			chunk /= 2
		} else if chunk > len(ops)/2 {
			chunk = len(ops) / 2
		}
	}
	return ops
}
