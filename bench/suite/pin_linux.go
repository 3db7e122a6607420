//go:build linux

package suite

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// CPUs returns the CPUs the calling thread may run on, in ascending order
// (the process's, unless something pinned that thread); nil if it cannot
// tell.
func CPUs() []int {
	cpus, _ := affinity()
	return cpus
}

// affinity returns the CPUs the calling thread may run on, in ascending
// order.
func affinity() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pin restricts the calling OS thread, which the caller has locked to its
// goroutine, to CPU cpu.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning a thread to CPU %d: %w", cpu, err)
	}
	return nil
}
