// Package soakplot draws the soak test's samples (`make soak`,
// e2e/soak_test.go) as small multiples: one panel per quantity, each on
// its own axis in its own unit. One shared axis would put MiB, goroutines,
// milliseconds and requests/s on one scale, with some series divided by 10
// to fit (the first docs/soak.png; issue 17).
package soakplot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Sample is one sampling interval of a soak run.
type Sample struct {
	At            time.Duration      // since the load started
	RPS           float64            // completed requests per second over the interval
	DecisionP99Ms float64            // decision overhead p99 over the interval
	OpenTickets   float64            // the extproc's accounted open requests
	RSSMiB        map[string]float64 // per process (extproc, engine0, …)
	Goroutines    map[string]float64 // per process that exports Go runtime metrics
}

// Panel is one quantity: a title, the unit of its y axis, and a series
// per process (or one).
type Panel struct {
	Title, Unit string
	Series      map[string]plotter.XYs
}

// Panels turns samples into one panel per quantity. NaN and infinite
// values (a failed scrape) are left out of their series; a series with no
// point is dropped, and so is a panel with no series.
func Panels(samples []Sample) []Panel {
	one := func(title, unit, name string, v func(Sample) float64) Panel {
		return Panel{Title: title, Unit: unit, Series: map[string]plotter.XYs{name: series(samples, v)}}
	}
	perProcess := func(title, unit string, m func(Sample) map[string]float64) Panel {
		p := Panel{Title: title, Unit: unit, Series: map[string]plotter.XYs{}}
		for _, s := range samples {
			for name := range m(s) {
				if _, ok := p.Series[name]; !ok {
					p.Series[name] = series(samples, func(s Sample) float64 {
						v, ok := m(s)[name]
						if !ok {
							return math.NaN()
						}
						return v
					})
				}
			}
		}
		return p
	}
	all := []Panel{
		one("completed requests", "requests/s", "completed", func(s Sample) float64 { return s.RPS }),
		one("decision overhead p99", "ms", "p99", func(s Sample) float64 { return s.DecisionP99Ms }),
		one("open requests in the extproc", "requests", "open tickets", func(s Sample) float64 { return s.OpenTickets }),
		perProcess("resident memory", "MiB", func(s Sample) map[string]float64 { return s.RSSMiB }),
		perProcess("goroutines", "goroutines", func(s Sample) map[string]float64 { return s.Goroutines }),
	}
	var out []Panel
	for _, p := range all {
		for name, xy := range p.Series {
			if len(xy) == 0 {
				delete(p.Series, name)
			}
		}
		if len(p.Series) > 0 {
			out = append(out, p)
		}
	}
	return out
}

func series(samples []Sample, v func(Sample) float64) plotter.XYs {
	xy := plotter.XYs{}
	for _, s := range samples {
		if y := v(s); !math.IsNaN(y) && !math.IsInf(y, 0) {
			xy = append(xy, plotter.XY{X: s.At.Minutes(), Y: y})
		}
	}
	return xy
}

// Write draws the panels into a PNG at path, two per row under title.
func Write(path, title string, samples []Sample) error {
	panels := Panels(samples)
	if len(panels) == 0 {
		return errors.New("soak plot: no data")
	}
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.Title
		p.X.Label.Text = "minutes into the load"
		p.Y.Label.Text = pn.Unit
		p.Y.Min = 0 // levels, not just their wiggle
		p.Add(plotter.NewGrid())
		names := make([]string, 0, len(pn.Series))
		for n := range pn.Series {
			names = append(names, n)
		}
		slices.Sort(names)
		for j, n := range names {
			line, err := plotter.NewLine(pn.Series[n])
			if err != nil {
				return fmt.Errorf("soak plot %s/%s: %w", pn.Title, n, err)
			}
			line.Color = plotutil.Color(j)
			line.Width = vg.Points(1.5)
			p.Add(line)
			if len(names) > 1 {
				p.Legend.Add(n, line)
			}
		}
		// Bottom left: the axes start at 0 and these levels sit well above
		// it, so the corner is empty.
		p.Legend.Left = true
		grid[i/cols][i%cols] = p
	}
	header := vg.Points(30)
	width, tileH := vg.Points(1000), vg.Points(240)
	img := vgimg.NewWith(vgimg.UseWH(width, tileH*vg.Length(rows)+header), vgimg.UseDPI(96))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	ts := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, XAlign: draw.XLeft, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	ts.Font.Size = vg.Points(14)
	dc.FillText(ts, vg.Point{X: vg.Points(10), Y: dc.Max.Y - vg.Points(8)}, title)
	body := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: dc.Min, Max: vg.Point{X: dc.Max.X, Y: dc.Max.Y - header}}}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(16), PadY: vg.Points(14), PadTop: vg.Points(4), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10)}
	canvases := plot.Align(grid, tiles, body)
	for r := range grid {
		for c := range grid[r] {
			if grid[r][c] != nil {
				grid[r][c].Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("soak plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("soak plot %s: %w", path, err)
	}
	return f.Close()
}
