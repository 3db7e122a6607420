//go:build linux

package conformance

import (
	"slices"

	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// shrink removes ops from a failing scenario while the same kind of
// failure stays at its last op, with demuxtest's minimizer: ops name
// their sockets by id, so that any sub-list of a scenario is one. It
// gives up after 3000 replays. It runs on the env thread.
func shrink(e *env, res result, excuse feature) result {
	full := res.ops[:res.fail.step+1]
	best, replays := res, 3000
	ops := demuxtest.Minimize(slices.Clone(full), nil, func(cand []op) bool {
		replays--
		got, err := replay(e, cand, excuse, false)
		if err != nil || got.fail == nil || got.fail.step != len(cand)-1 || got.fail.kind != res.fail.kind {
			return false
		}
		best = got
		return true
	}, func() bool { return replays > 0 })
	if len(ops) == len(full) {
		// Nothing removed: replay once for a trace that ends at the failure.
		if got, err := replay(e, ops, excuse, false); err == nil && got.fail != nil {
			best = got
		}
	}
	best.ops = ops
	return best
}
