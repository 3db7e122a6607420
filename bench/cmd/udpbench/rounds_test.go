package main

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bench/suite"
)

// TestLookupsAcrossAlternates checks that lookupsAcross times the sizes
// of a shape in the same rounds, a size after another, rather than each
// size's rounds in a block (what lookups called size by size does), and
// that each size still gets a figure from its own rounds.
func TestLookupsAcrossAlternates(t *testing.T) {
	shortBenchtime(t)

	shs := []*suite.Shape{suite.SamePort(100, 256, 1), suite.SamePort(200, 256, 1)}
	var got []string
	r := &runner{c: config{runs: 3}, vals: map[key]float64{}, measured: func(l string) { got = append(got, l) }}
	ress := r.lookupsAcross(shs, []string{suite.SetBound}, []suite.Target{suite.Hybrid, suite.Floor}, suite.Options{}, nil, nil, nil)
	require.Empty(t, r.errs)

	var want []string
	for range 3 {
		for _, sh := range shs {
			for _, tg := range []suite.Target{suite.Hybrid, suite.Floor} {
				want = append(want, sh.Name+" "+suite.SetBound+" "+tg.Name)
			}
		}
	}
	assert.Equal(t, want, got)
	require.Len(t, ress, len(shs))
	for i, res := range ress {
		assert.Same(t, shs[i], res.shape)
		for _, tg := range []suite.Target{suite.Hybrid, suite.Floor} {
			assert.True(t, res.get(suite.SetBound, tg.Name).ok, "%s %s", shs[i].Name, tg.Name)
		}
	}
}

// TestLookupsWithMoreAlternates checks that a further benchmark that
// lookupsWith is given (as the batch scenario gives its batch lookup) is
// timed in each round right after the sets, not in rounds of its own.
func TestLookupsWithMoreAlternates(t *testing.T) {
	const extra = "extra"
	shortBenchtime(t)

	sh, base := suite.SamePort(100, 256, 1), suite.SamePort(10, 256, 1)
	bf, _, err := suite.Prepare(suite.Floor, base, suite.Options{})
	require.NoError(t, err)
	defer bf.Close()
	var got []string
	r := &runner{c: config{runs: 3}, vals: map[key]float64{}, measured: func(l string) { got = append(got, l) }}
	res := r.lookupsWith(sh, []string{suite.SetBound}, []suite.Target{suite.Floor}, suite.Options{}, nil,
		func(suite.Target, suite.Fixture) map[string]func(*testing.B) {
			return map[string]func(*testing.B){extra: bf.Bench(base.SetIndex(suite.SetBound))}
		}, nil)
	require.Empty(t, r.errs)
	var want []string
	for range 3 {
		want = append(want, sh.Name+" "+suite.SetBound+" "+suite.Floor.Name, sh.Name+" "+extra+" "+suite.Floor.Name)
	}
	assert.Equal(t, want, got)
	assert.True(t, res.get(extra, suite.Floor.Name).ok)
	assert.True(t, res.get(suite.SetBound, suite.Floor.Name).ok)
}

// shortBenchtime makes each measurement of the test 2 ms long, and puts
// the flag back when the test ends.
func shortBenchtime(t *testing.T) {
	bt := flag.Lookup("test.benchtime")
	require.NotNil(t, bt)
	old := bt.Value.String()
	require.NoError(t, flag.Set("test.benchtime", "2ms"))
	t.Cleanup(func() { _ = flag.Set("test.benchtime", old) })
}
