//go:build linux

package conformance

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/udpdemux/udpdemux/internal/model"
)

// probeEnv is an env with what the probes' steps read, for tests of the
// model alone.
func probeEnv() *env {
	e := &env{ports: []uint16{50000, 50001}, probe: 50999, devs: []device{{"lo", 1}, {"veth0", 3}, {"veth1", 2}}}
	for i := 1; i <= 14; i++ {
		e.fillers4 = append(e.fillers4, netip.AddrFrom4([4]byte{127, 0, 1, byte(i)}))
	}
	return e
}

// TestProbesDecide checks that each probe tells its feature: the model
// answers its last step one way with the feature and another without, and
// no other feature changes either answer, so that a kernel that lacks some
// other feature cannot make the probe misread this one.
func TestProbesDecide(t *testing.T) {
	e := probeEnv()
	seen := model.Features(0)
	for _, p := range kprobes {
		t.Run(p.f.String(), func(t *testing.T) {
			seen |= p.f
			steps := p.steps(e)
			on := model.Linux &^ p.off
			with, err := modelProbe(steps, on)
			require.NoError(t, err)
			without, err := modelProbe(steps, on&^p.f)
			require.NoError(t, err)
			require.NotEqual(t, with, without, "the probe does not tell %v", p.f)
			for _, g := range each {
				if g == p.f || g&p.off != 0 {
					continue
				}
				w, err := modelProbe(steps, on^g)
				require.NoError(t, err)
				wo, err := modelProbe(steps, on&^p.f^g)
				require.NoError(t, err)
				assert.Equal(t, with, w, "with %v: flipping %v changes the answer", p.f, g)
				assert.Equal(t, without, wo, "without %v: flipping %v changes the answer", p.f, g)
			}
			has, err := decide(p.f, with, with, without)
			require.NoError(t, err)
			assert.True(t, has)
			has, err = decide(p.f, without, with, without)
			require.NoError(t, err)
			assert.False(t, has)
			_, err = decide(p.f, "neither", with, without)
			assert.Error(t, err, "an answer the model gives neither way must stop the test")
		})
	}
	assert.Equal(t, model.Linux, seen, "every feature of the model has a probe")
}

// TestModelFollowsProbe gives the comparison both results of the probe for
// deliberate difference 1, on the shape (a plain socket on
// 127.0.0.1, a SO_REUSEPORT one on 127.0.0.2, then a SO_REUSEPORT bind of
// 0.0.0.0): on a kernel with the difference, the third bind is a
// deliberate step (kernel ok, table EADDRINUSE); on one without, it is an
// ordinary step, where kernel and table must both say EADDRINUSE.
func TestModelFollowsProbe(t *testing.T) {
	steps := kprobes[0].steps(probeEnv())
	require.Equal(t, model.Diff1, kprobes[0].f)
	m := newModel()
	for _, st := range steps[:len(steps)-1] {
		_, err := m.probeStep(st, model.Linux)
		require.NoError(t, err)
	}
	last := steps[len(steps)-1]
	answer := func(on feature) syscall.Errno { return m.check(last.bind, on) }
	eq := func(a, b syscall.Errno) bool { return a == b }

	for _, c := range []struct {
		name       string
		kern       feature
		kernel     syscall.Errno
		deliberate bool
		kinds      feature
	}{
		{"kernel with difference 1", model.Linux, 0, true, model.Diff1},
		{"kernel without difference 1", model.Linux &^ model.Diff1, syscall.EADDRINUSE, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := classify(c.kern, deliberate, answer, eq)
			assert.Equal(t, c.kernel, v.kernel, "what the kernel must say")
			assert.Equal(t, syscall.EADDRINUSE, v.rule, "what the table must say")
			assert.Equal(t, c.deliberate, v.deliberate)
			assert.Equal(t, c.kinds, v.kinds)
		})
	}
}
