//go:build !linux

package conformance

import (
	"runtime"
	"testing"
)

func TestKernelConformance(t *testing.T) {
	t.Skipf("kernel conformance test skipped: it compares udpdemux with the Linux kernel's UDP socket table and needs Linux (GOOS=%s)", runtime.GOOS)
}

func TestKernelDesignTable(t *testing.T) {
	t.Skipf("kernel conformance test skipped: it runs DESIGN.md's semantics table and random scenarios against Linux and needs Linux (GOOS=%s)", runtime.GOOS)
}
