package main

import (
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
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

// tick is a labelled mark on a plot's x axis.
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

// plot writes a log-log line plot of ss to plots/file under the output
// directory; xticks, if any, replace the x axis' ticks.
func (r *runner) plot(file, title, xlabel, ylabel string, ss []series, xticks []tick) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	if len(xticks) > 0 {
		p.X.Tick.Marker = fixedTicks(xticks)
	}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	n := 0
	for i, s := range ss {
		if len(s.xs) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.xs))
		for j := range s.xs {
			xys[j].X, xys[j].Y = s.xs[j], s.ys[j]
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			r.fail("plot %s: %v", file, err)
			return
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
		n++
	}
	if n == 0 {
		return
	}
	p.Y.Max *= 6 // room for the legend above the lines
	path := filepath.Join(r.c.out, "plots", file)
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		r.fail("plot %s: %v", file, err)
		return
	}
	r.plots = append(r.plots, file)
	r.printf("![%s](plots/%s)\n\n", title, file)
	r.progress("wrote %s", path)
}
