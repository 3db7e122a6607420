//go:build !race

package demux_test

const raceEnabled = false
