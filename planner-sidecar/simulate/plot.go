package simulate

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotColors tells policies apart (Tableau 10).
var plotColors = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

// WritePlots writes PNG charts into dir: gpus.png (GPUs billed over time),
// ttft_p90.png and itl_p90.png (per-interval p90 latencies, with the
// target), and load.png (the arrival rate), for the planner, the threshold
// policy and the cheapest static fleet reaching SLAGoal (the other static
// fleets are flat lines that would hide the rest).
func WritePlots(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plot dir: %w", err)
	}
	var shown []*Result
	for _, r := range rep.Results {
		if r.Static == nil || r == rep.Cheapest {
			shown = append(shown, r)
		}
	}
	charts := []struct {
		file, title, y string
		value          func(Point) float64
		one            bool // one line is enough (the load is the same for all)
	}{
		{"gpus.png", "GPUs billed (ready + provisioning + draining)", "GPUs", func(p Point) float64 { return float64(p.Billed) }, false},
		{"ttft_p90.png", "TTFT p90 per interval", "ms", func(p Point) float64 { return p.TTFTP90 }, false},
		{"itl_p90.png", "mean ITL p90 per interval", "ms", func(p Point) float64 { return p.ITLP90 }, false},
		{"load.png", "arrival rate: " + rep.Load, "requests/s", func(p Point) float64 { return p.Rate }, true},
	}
	for _, c := range charts {
		p := plot.New()
		p.Title.Text = c.title
		p.X.Label.Text = "simulated time (min)"
		p.Y.Label.Text = c.y
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		for i, r := range shown {
			xy := make(plotter.XYs, len(r.Timeline))
			for j, pt := range r.Timeline {
				xy[j] = plotter.XY{X: pt.T.Minutes(), Y: c.value(pt)}
			}
			line, err := plotter.NewLine(xy)
			if err != nil {
				return fmt.Errorf("plot %s: %w", c.file, err)
			}
			line.Color = plotColors[i%len(plotColors)]
			line.Width = vg.Points(1.5)
			p.Add(line)
			if !c.one {
				p.Legend.Add(r.Policy, line)
			}
			if c.one {
				break
			}
		}
		if err := p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(dir, c.file)); err != nil {
			return fmt.Errorf("plot %s: %w", c.file, err)
		}
	}
	return nil
}
