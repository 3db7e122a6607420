//go:build linux

package suite

import (
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestPinned: runParallel with CPUs runs each lookup goroutine on a thread
// that may run on its CPU only, and without CPUs on threads that may run
// on any; a CPU that cannot be had is an error, not an unpinned run.
func TestPinned(t *testing.T) {
	all := CPUs()
	require.NotEmpty(t, all)
	cases := []struct {
		name string
		cpus []int
		want [][]int // the affinities the lookups may see, and must see all of
	}{
		{"unpinned", nil, [][]int{all}},
		{"one CPU, the last", all[len(all)-1:], [][]int{all[len(all)-1:]}},
	}
	if len(all) >= 2 {
		cases = append(cases, struct {
			name string
			cpus []int
			want [][]int
		}{"one on each of two", all[:2], [][]int{all[:1], all[1:2]}})
	} else {
		// The runner pins two goroutines only where it can; this case
		// must run in CI all the same.
		t.Run("one on each of two", func(t *testing.T) {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI machine with %d CPU to pin to: the two-CPU case cannot run", len(all))
			}
			t.Skipf("%d CPU to pin to", len(all))
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen [][]int
			look := func(from, count int) uint64 {
				a, err := affinity()
				if err != nil {
					t.Errorf("sched_getaffinity: %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				if !slices.ContainsFunc(seen, func(s []int) bool { return slices.Equal(s, a) }) {
					seen = append(seen, a)
				}
				return 0
			}
			g := max(1, len(c.cpus))
			res, err := runParallel(1024, g, c.cpus, 50*time.Millisecond, NoWriter, look, nil)
			require.NoError(t, err)
			assert.Positive(t, res.Lookups)
			assert.ElementsMatch(t, c.want, seen)
		})
	}
	t.Run("no such CPU", func(t *testing.T) {
		_, err := runParallel(1024, 1, []int{len(unix.CPUSet{})*64 - 1}, 10*time.Millisecond, NoWriter,
			func(int, int) uint64 { return 0 }, nil)
		assert.Error(t, err)
	})
	t.Run("a CPU for each goroutine", func(t *testing.T) {
		_, err := runParallel(1024, 2, all[:1], 10*time.Millisecond, NoWriter, func(int, int) uint64 { return 0 }, nil)
		assert.Error(t, err)
	})
}
