//go:build !linux

package suite

import (
	"errors"
	"testing"
)

// ErrNoNamespace is the error of the kernel contender off Linux.
var ErrNoNamespace = errors.New("the kernel contender needs Linux")

func prepareBind0Kernel(map[uint16]bool) (Bind0Fixture, error) {
	return nil, ErrNoNamespace
}

// KernelSocketClose is unavailable off Linux.
func KernelSocketClose() func(*testing.B) {
	return func(b *testing.B) { b.Skip(ErrNoNamespace) }
}
