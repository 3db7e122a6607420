//go:build !linux

package suite

import "errors"

// CPUs returns nil: pinning goroutines to CPUs needs Linux.
func CPUs() []int { return nil }

func pin(int) error { return errors.New("pinning a thread to a CPU needs Linux") }
