package main

import (
	"context"
	"fmt"
	"image/color"
	"math"
	"os"
	"regexp"
	"sort"
	"time"

	"github.com/prometheus/prometheus/promql"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/kvgate/kvgate/deploy/inventory"
)

// window is the time range the panels are evaluated over.
type window struct {
	start, end time.Time
	step       time.Duration
	// rateInterval is what Grafana would put in $__rate_interval for this
	// scrape interval (at least four scrapes).
	rateInterval time.Duration
}

// unitScale turns a Grafana unit into a multiplier and an axis label.
func unitScale(unit string) (float64, string) {
	switch unit {
	case "s":
		return 1000, "ms"
	case "percentunit":
		return 100, "%"
	case "reqps":
		return 1, "requests/s"
	case "ops":
		return 1, "per second"
	}
	return 1, ""
}

var legendVar = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// panelPlot evaluates every query of a panel as a range query and plots
// the series. It returns the plot and the number of series with data.
func panelPlot(ctx context.Context, eng *promql.Engine, st *memStore, d *inventory.Dashboard, p inventory.Panel, w window) (*plot.Plot, int, error) {
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Title.TextStyle.Font.Size = vg.Points(11)
	scale, ylabel := unitScale(p.Unit())
	pl.Y.Label.Text = ylabel
	pl.X.Label.Text = "seconds into the demo"
	pl.Legend.Top = true
	pl.Legend.Left = true
	pl.Legend.TextStyle.Font.Size = vg.Points(7)
	pl.Legend.Padding = vg.Points(1)
	pl.Add(plotter.NewGrid())
	values := map[string]string{"__rate_interval": w.rateInterval.String()}
	n := 0
	for _, t := range p.Targets {
		expr, unknown := d.Expand(t.Expr, values)
		if len(unknown) > 0 {
			return nil, 0, fmt.Errorf("panel %q: undefined variables %v", p.Title, unknown)
		}
		q, err := eng.NewRangeQuery(ctx, st, nil, expr, w.start, w.end, w.step)
		if err != nil {
			return nil, 0, fmt.Errorf("panel %q: %s: %w", p.Title, expr, err)
		}
		res := q.Exec(ctx)
		if res.Err != nil {
			q.Close()
			return nil, 0, fmt.Errorf("panel %q: %s: %w", p.Title, expr, res.Err)
		}
		m, err := res.Matrix()
		if err != nil {
			q.Close()
			return nil, 0, fmt.Errorf("panel %q: %w", p.Title, err)
		}
		sort.Slice(m, func(i, j int) bool { return m[i].Metric.String() < m[j].Metric.String() })
		for _, s := range m {
			name := legendVar.ReplaceAllStringFunc(t.LegendFormat, func(v string) string {
				return s.Metric.Get(legendVar.FindStringSubmatch(v)[1])
			})
			if name == "" {
				name = s.Metric.String()
			}
			if addSeries(pl, s, name, n, scale, w.start) {
				n++
			}
		}
		q.Close()
	}
	if n == 0 {
		pl.Title.Text += " (no data in this demo)"
		pl.Y.Min, pl.Y.Max = 0, 1
	}
	pl.X.Min, pl.X.Max = 0, w.end.Sub(w.start).Seconds()
	if pl.Y.Min > 0 {
		pl.Y.Min = 0
	}
	if pl.Y.Max <= pl.Y.Min { // all zero: show 0..1 rather than a band around 0
		pl.Y.Max = pl.Y.Min + 1
	} else {
		// Headroom for the legend, drawn in the top left corner.
		pl.Y.Max += 0.3 * (pl.Y.Max - pl.Y.Min)
	}
	return pl, n, nil
}

// addSeries draws one series as line segments split at missing or
// non-finite points (e.g. a quantile over no traffic), one legend entry.
func addSeries(pl *plot.Plot, s promql.Series, name string, i int, scale float64, start time.Time) bool {
	col := plotutil.Color(i)
	var seg plotter.XYs
	drawn := false
	var lastT int64 = -1
	flush := func() {
		if len(seg) == 0 {
			return
		}
		l, err := plotter.NewLine(seg)
		if err != nil {
			seg = nil
			return
		}
		l.Color = col
		l.Width = vg.Points(1.5)
		pl.Add(l)
		if !drawn {
			pl.Legend.Add(name, l)
			drawn = true
		}
		seg = nil
	}
	for _, f := range s.Floats {
		if math.IsNaN(f.F) || math.IsInf(f.F, 0) || (lastT >= 0 && f.T-lastT > 30_000) {
			flush()
			if math.IsNaN(f.F) || math.IsInf(f.F, 0) {
				continue
			}
		}
		seg = append(seg, plotter.XY{X: float64(f.T-start.UnixMilli()) / 1000, Y: f.F * scale})
		lastT = f.T
	}
	flush()
	return drawn
}

// renderDashboard draws every panel of a dashboard into one PNG: a grid of
// three columns in the dashboard's panel order, under a header line.
func renderDashboard(ctx context.Context, eng *promql.Engine, st *memStore, d *inventory.Dashboard, w window, path string) (panels, withData int, err error) {
	var plots []*plot.Plot
	for _, p := range d.AllPanels() {
		if p.Type == "row" || len(p.Targets) == 0 {
			continue
		}
		pl, n, err := panelPlot(ctx, eng, st, d, p, w)
		if err != nil {
			return 0, 0, err
		}
		plots = append(plots, pl)
		if n > 0 {
			withData++
		}
	}
	const cols = 3
	rows := (len(plots) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
		for c := range grid[r] {
			if i := r*cols + c; i < len(plots) {
				grid[r][c] = plots[i]
			}
		}
	}
	header := vg.Points(34)
	width, tileH := vg.Points(1500), vg.Points(300)
	img := vgimg.NewWith(vgimg.UseWH(width, tileH*vg.Length(rows)+header), vgimg.UseDPI(96))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	title := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, XAlign: draw.XLeft, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	title.Font.Size = vg.Points(15)
	dc.FillText(title, vg.Point{X: vg.Points(10), Y: dc.Max.Y - vg.Points(8)},
		fmt.Sprintf("%s — from a `kvgate-lab demo` run: %.0f s of trace replay, scraped every %s", d.Title, w.end.Sub(w.start).Seconds(), w.step))
	body := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: dc.Min, Max: vg.Point{X: dc.Max.X, Y: dc.Max.Y - header}}}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(12), PadY: vg.Points(14), PadTop: vg.Points(4), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10)}
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
		return 0, 0, err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return 0, 0, err
	}
	return len(plots), withData, f.Close()
}
