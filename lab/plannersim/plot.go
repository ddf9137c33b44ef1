package plannersim

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotColors tells policies apart (Tableau 10).
var plotColors = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

const (
	chartWidth, chartHeight = 9 * vg.Inch, 4 * vg.Inch
	// legendWidth is the strip right of the plot area that holds the
	// legend, so that no legend entry covers a line.
	legendWidth = 1.6 * vg.Inch
)

// chartSeries is one line of a chart; dashed lines are targets.
type chartSeries struct {
	name   string // legend entry; "" for none
	xy     plotter.XYs
	color  color.Color
	dashed bool
}

// chart is what one PNG shows, kept apart from drawing so that a test can
// check every series has data.
type chart struct {
	file, title, y string
	series         []chartSeries
}

// WritePlots writes PNG charts into dir: gpus.png (GPUs billed over time),
// ttft_p90.png and itl_p90.png (per-interval p90 latencies, with the SLA
// target as a dashed line), and load.png (the arrival rate), for the
// planner, the threshold policy and the cheapest static fleet reaching
// SLAGoal (the other static fleets are flat lines that would hide the rest).
// Legends sit outside the plot area.
func WritePlots(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plot dir: %w", err)
	}
	for _, c := range reportCharts(rep) {
		if err := c.save(filepath.Join(dir, c.file)); err != nil {
			return fmt.Errorf("plot %s: %w", c.file, err)
		}
	}
	return nil
}

func reportCharts(rep *Report) []chart {
	var shown []*Result
	for _, r := range rep.Results {
		if r.Static == nil || r == rep.Cheapest {
			shown = append(shown, r)
		}
	}
	specs := []struct {
		file, title, y string
		value          func(Point) float64
		one            bool          // one line is enough (the load is the same for all)
		target         time.Duration // SLA target drawn dashed; 0 for none
	}{
		{"gpus.png", "GPUs billed (ready + provisioning + draining)", "GPUs", func(p Point) float64 { return float64(p.Billed) }, false, 0},
		{"ttft_p90.png", "TTFT p90 per interval", "ms", func(p Point) float64 { return p.TTFTP90 }, false, rep.TTFTTarget},
		{"itl_p90.png", "mean ITL p90 per interval", "ms", func(p Point) float64 { return p.ITLP90 }, false, rep.ITLTarget},
		{"load.png", "arrival rate: " + rep.Load, "requests/s", func(p Point) float64 { return p.Rate }, true, 0},
	}
	var out []chart
	for _, s := range specs {
		c := chart{file: s.file, title: s.title, y: s.y}
		tmin, tmax := math.Inf(1), math.Inf(-1)
		for i, r := range shown {
			xy := make(plotter.XYs, len(r.Timeline))
			for j, pt := range r.Timeline {
				xy[j] = plotter.XY{X: pt.T.Minutes(), Y: s.value(pt)}
				tmin, tmax = min(tmin, xy[j].X), max(tmax, xy[j].X)
			}
			name := r.Policy
			if s.one {
				name = ""
			}
			c.series = append(c.series, chartSeries{name: name, xy: xy, color: plotColors[i%len(plotColors)]})
			if s.one {
				break
			}
		}
		if s.target > 0 && tmax > tmin {
			ms := float64(s.target) / float64(time.Millisecond)
			c.series = append(c.series, chartSeries{name: fmt.Sprintf("target %g ms", ms),
				xy: plotter.XYs{{X: tmin, Y: ms}, {X: tmax, Y: ms}}, color: color.Black, dashed: true})
		}
		out = append(out, c)
	}
	return out
}

// save draws the plot in the left part of the image and, when any series is
// named, the legend in a strip on the right (gonum's own legend is drawn
// inside the data area, where it covered lines).
func (c chart) save(path string) error {
	p := plot.New()
	p.Title.Text = c.title
	p.X.Label.Text = "simulated time (min)"
	p.Y.Label.Text = c.y
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Left, legend.Top = true, true
	named := false
	for _, s := range c.series {
		line, err := plotter.NewLine(s.xy)
		if err != nil {
			return err
		}
		line.Color = s.color
		line.Width = vg.Points(1.5)
		if s.dashed {
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		}
		p.Add(line)
		if s.name != "" {
			legend.Add(s.name, line)
			named = true
		}
	}
	// Headroom above the highest line, so a target at the top of the data
	// is not drawn on the frame.
	p.Y.Max += 0.05 * (p.Y.Max - p.Y.Min)
	img := vgimg.New(chartWidth, chartHeight)
	dc := draw.New(img)
	if named {
		p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
		// Below the title's height, with a small gap from the plot.
		legend.Draw(draw.Crop(dc, chartWidth-legendWidth+vg.Points(8), 0, 0, -vg.Points(28)))
	} else {
		p.Draw(dc)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
