package main

import (
	"fmt"
	"math"
	"strings"
)

// table is a Markdown table.
type table struct {
	head []string
	rows [][]string
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// String renders the table with padded columns; the first column is
// left-aligned, the others right-aligned.
func (t *table) String() string {
	w := make([]int, len(t.head))
	for i, h := range t.head {
		w[i] = len([]rune(h))
	}
	for _, r := range t.rows {
		for i, c := range r {
			if i < len(w) {
				w[i] = max(w[i], len([]rune(c)))
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for i := range w {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			pad := strings.Repeat(" ", w[i]-len([]rune(c)))
			if i == 0 {
				fmt.Fprintf(&b, " %s%s |", c, pad)
			} else {
				fmt.Fprintf(&b, " %s%s |", pad, c)
			}
		}
		b.WriteString("\n")
	}
	line(t.head)
	b.WriteString("|")
	for i := range w {
		if i == 0 {
			b.WriteString(" " + strings.Repeat("-", w[i]) + " |")
		} else {
			b.WriteString(" " + strings.Repeat("-", w[i]-1) + ": |")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		line(r)
	}
	return b.String()
}

// units is a scale of units, smallest first: a value is shown in the
// first unit it is below, divided by div, with format.
type units []struct {
	below, div float64
	format     string
}

// show formats v in its unit; NaN (a missing figure) and ±Inf (a ratio to
// a zero one) show as —.
func (us units) show(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	u := us[len(us)-1]
	for _, c := range us {
		if v < c.below {
			u = c
			break
		}
	}
	return fmt.Sprintf(u.format, v/u.div)
}

// The scales of the report's figures.
var (
	nsUnits    = units{{10, 1, "%.2f ns"}, {1e3, 1, "%.1f ns"}, {1e6, 1e3, "%.3g µs"}, {math.Inf(1), 1e6, "%.3g ms"}}
	xUnits     = units{{10, 1, "%.2f×"}, {100, 1, "%.1f×"}, {math.Inf(1), 1, "%.0f×"}}
	rateUnits  = units{{1e3, 1, "%.0f /s"}, {1e6, 1e3, "%.1f k/s"}, {math.Inf(1), 1e6, "%.2f M/s"}}
	bytesUnits = units{{1024, 1, "%.0f B"}, {1 << 20, 1024, "%.1f KiB"}, {math.Inf(1), 1 << 20, "%.1f MiB"}}
)

// fmtNs formats a duration in nanoseconds with a unit.
func fmtNs(ns float64) string { return nsUnits.show(ns) }

// fmtX formats a ratio.
func fmtX(x float64) string { return xUnits.show(x) }

// fmtRate formats a rate per second.
func fmtRate(r float64) string { return rateUnits.show(r) }

// fmtBytes formats a size in bytes.
func fmtBytes(b float64) string { return bytesUnits.show(b) }

// fmtAllocs formats allocations per operation to three significant
// digits: one allocation over a measurement of thousands of slow lookups
// (a -quick run takes one measurement, so the fewest of several cannot
// drop it) must not read "0.00" beside a verdict of not met.
func fmtAllocs(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.3g allocs", x)
}

// fmtFaster formats how many times faster something is, given its
// speed-up x (the other's time divided by its own): "2.50× faster", or
// for x below 1, "1.47× slower" rather than "0.68× faster".
func fmtFaster(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0) || x <= 0:
		return "—"
	case x >= 1:
		return fmtX(x) + " faster"
	}
	return fmtX(1/x) + " slower"
}

// fmtInt formats an integer with its digits in groups of three.
func fmtInt(n int) string {
	s := fmt.Sprint(n)
	if n < 1000 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString(" ")
		}
		b.WriteRune(c)
	}
	return b.String()
}
