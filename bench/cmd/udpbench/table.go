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

// fmtNs formats a duration in nanoseconds with a unit.
func fmtNs(ns float64) string {
	switch {
	case math.IsNaN(ns):
		return "—"
	case ns < 10:
		return fmt.Sprintf("%.2f ns", ns)
	case ns < 1000:
		return fmt.Sprintf("%.1f ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	default:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	}
}

// fmtX formats a ratio.
func fmtX(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "—"
	case x >= 100:
		return fmt.Sprintf("%.0f×", x)
	case x >= 10:
		return fmt.Sprintf("%.1f×", x)
	default:
		return fmt.Sprintf("%.2f×", x)
	}
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

// fmtRate formats a rate per second.
func fmtRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2f M/s", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1f k/s", r/1e3)
	default:
		return fmt.Sprintf("%.0f /s", r)
	}
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
