//go:build linux

package conformance

import (
	"slices"
)

// shrink removes ops from a failing scenario while the same kind of
// failure stays at its last op. It runs on the env thread.
func shrink(e *env, res result, excuse feature) result {
	cur := slices.Clone(res.ops[:res.fail.step+1])
	best := res
	budget := 3000
	for changed := true; changed && budget > 0; {
		changed = false
		for i := len(cur) - 2; i >= 0 && budget > 0; i-- {
			cand := slices.Delete(slices.Clone(cur), i, i+1)
			budget--
			got, err := replay(e, cand, excuse, false)
			if err != nil || got.fail == nil || got.fail.step != len(cand)-1 || got.fail.kind != res.fail.kind {
				continue
			}
			cur, best, changed = cand, got, true
		}
	}
	if len(cur) == len(res.ops[:res.fail.step+1]) {
		// Nothing removed: replay once for a trace that ends at the failure.
		if got, err := replay(e, cur, excuse, false); err == nil && got.fail != nil {
			best = got
		}
	}
	best.ops = cur
	return best
}
