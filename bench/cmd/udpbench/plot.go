package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one line of a plot.
type series struct {
	name   string
	xs, ys []float64
}

func (s *series) add(x, y float64) {
	s.xs = append(s.xs, x)
	s.ys = append(s.ys, y)
}

// tick is a mark on a plot's x axis; an empty label makes a small mark.
type tick struct {
	x     float64
	label string
}

// fixedTicks marks the given ticks only.
type fixedTicks []tick

// Ticks implements plot.Ticker.
func (t fixedTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for _, k := range t {
		if k.x >= min && k.x <= max {
			ts = append(ts, plot.Tick{Value: k.x, Label: k.label})
		}
	}
	return ts
}

// sizeTicks puts a tick at every measured size, labelled as the tables
// write it, leaving out the label of a size too close to the previous
// labelled one on a log axis for both to be read.
func sizeTicks(xs []int) []tick {
	var ts []tick
	last := math.Inf(-1)
	for _, x := range xs {
		t := tick{x: float64(x)}
		if math.Log10(float64(x))-last >= 0.15 {
			t.label = fmtInt(x)
			last = math.Log10(float64(x))
		}
		ts = append(ts, t)
	}
	return ts
}

// timeTicks marks 1, 2 and 5 times each power of ten between min and max
// nanoseconds, labelled as the tables write times.
type timeTicks struct{}

// Ticks implements plot.Ticker.
func (timeTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(min)); math.Pow(10, e) <= max; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= min && v <= max {
				ts = append(ts, plot.Tick{Value: v, Label: fmtTime(v)})
			}
		}
	}
	return ts
}

// fmtTime formats a round number of nanoseconds for an axis.
func fmtTime(ns float64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%g ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%g µs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%g ms", ns/1e6)
	}
	return fmt.Sprintf("%g s", ns/1e9)
}

// plotFile is a rendered plot, written with the report.
type plotFile struct {
	name string
	svg  []byte
}

// plot renders a log-log line plot of times in nanoseconds against the x
// values of xticks, with the legend to the right of the data, and links
// it from the report; the file is written with the report.
func (r *runner) plot(file, title, xlabel string, ss []series, xticks []tick) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "time per operation (lower is better)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = fixedTicks(xticks)
	p.Y.Tick.Marker = timeTicks{}
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	n := 0
	for i, s := range ss {
		if len(s.xs) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.xs))
		for j := range s.xs {
			xys[j].X, xys[j].Y = s.xs[j], s.ys[j]
			xmin, xmax = math.Min(xmin, s.xs[j]), math.Max(xmax, s.xs[j])
			ymin, ymax = math.Min(ymin, s.ys[j]), math.Max(ymax, s.ys[j])
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			r.fail("plot %s: %v", file, err)
			return
		}
		l.Color, l.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		pts.Color, pts.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(l, pts)
		leg.Add(s.name, l, pts)
		n++
	}
	if n == 0 {
		return
	}
	for _, t := range xticks {
		xmin, xmax = math.Min(xmin, t.x), math.Max(xmax, t.x)
	}
	// Room around the data, so that no point sits on the frame and the
	// extreme tick labels are not cut.
	p.X.Min, p.X.Max = xmin/1.25, xmax*1.25
	p.Y.Min, p.Y.Max = ymin/1.5, ymax*1.5
	if p.Y.Max/p.Y.Min < 10 { // at least two labelled ticks
		p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(p.Y.Min))), math.Pow(10, math.Ceil(math.Log10(p.Y.Max)))
	}
	var legW vg.Length
	for _, s := range ss {
		if len(s.xs) > 0 {
			legW = max(legW, leg.TextStyle.Width(s.name))
		}
	}
	// A third more than the text needs: a viewer without the SVG's font
	// substitutes a wider one.
	legW = legW*4/3 + leg.ThumbnailWidth + 4*vg.Millimeter
	const w, h = 8 * vg.Inch, 4.5 * vg.Inch
	c, err := draw.NewFormattedCanvas(w, h, "svg")
	if err != nil {
		r.fail("plot %s: %v", file, err)
		return
	}
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -legW-2*vg.Millimeter, 0, 0))
	leg.Draw(draw.Crop(dc, w-legW, 0, 0, -p.Title.TextStyle.Rectangle(title).Size().Y-p.Title.Padding))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		r.fail("plot %s: %v", file, err)
		return
	}
	r.plots = append(r.plots, plotFile{file, buf.Bytes()})
	r.printf("![%s](plots/%s)\n\n", title, file)
}

// savePlots writes the run's plots under dir/plots.
func (r *runner) savePlots(dir string) error {
	for _, p := range r.plots {
		path := filepath.Join(dir, "plots", p.name)
		if err := os.WriteFile(path, p.svg, 0o644); err != nil {
			return err
		}
		r.detail("wrote %s", path)
	}
	return nil
}
