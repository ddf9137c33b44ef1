package replay

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Charts are hand-written SVG: no dependency, and a person can open them in
// any browser.

var palette = []string{"#7f7f7f", "#bcbd22", "#17becf", "#9467bd", "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"}

const (
	plotW, plotH                       = 760, 440
	marginL, marginR, marginT, marginB = 70, 170, 40, 50
)

// WritePlots writes ttft_cdf.svg and hit_ratio.svg into dir and returns the
// paths written.
func WritePlots(dir string, res *Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot dir: %w", err)
	}
	var paths []string
	for _, c := range []struct {
		name string
		draw func(io.Writer, *Result)
	}{{"ttft_cdf.svg", drawTTFTCDF}, {"hit_ratio.svg", drawHitOverTime}} {
		var b strings.Builder
		c.draw(&b, res)
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return paths, fmt.Errorf("plot %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

type frame struct {
	w                      io.Writer
	xmin, xmax, ymin, ymax float64
	logX                   bool
}

func (f *frame) x(v float64) float64 {
	lo, hi := f.xmin, f.xmax
	if f.logX {
		v, lo, hi = math.Log10(max(v, 1e-9)), math.Log10(lo), math.Log10(hi)
	}
	return marginL + (v-lo)/(hi-lo)*float64(plotW-marginL-marginR)
}

func (f *frame) y(v float64) float64 {
	return float64(plotH-marginB) - (v-f.ymin)/(f.ymax-f.ymin)*float64(plotH-marginT-marginB)
}

func (f *frame) begin(title, xlabel, ylabel string) {
	fmt.Fprintf(f.w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(f.w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(f.w, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, html.EscapeString(title))
	fmt.Fprintf(f.w, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (plotW-marginR+marginL)/2, plotH-12, html.EscapeString(xlabel))
	fmt.Fprintf(f.w, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (plotH-marginB+marginT)/2, html.EscapeString(ylabel))
	fmt.Fprintf(f.w, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", marginL, marginT, plotW-marginL-marginR, plotH-marginT-marginB)
}

func (f *frame) xtick(v float64, label string) {
	x := f.x(v)
	fmt.Fprintf(f.w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, marginT, x, plotH-marginB, x, plotH-marginB+16, label)
}

func (f *frame) ytick(v float64, label string) {
	y := f.y(v)
	fmt.Fprintf(f.w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", marginL, y, plotW-marginR, y, marginL-6, y+4, label)
}

func (f *frame) legend(i int, name, color string, dashed bool) {
	y := marginT + 14 + 20*i
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(f.w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/><text x="%d" y="%d">%s</text>`+"\n",
		plotW-marginR+12, y, plotW-marginR+36, y, color, dash, plotW-marginR+42, y+4, html.EscapeString(name))
}

func (f *frame) polyline(xs, ys []float64, color string, dashed bool) {
	var b strings.Builder
	for i := range xs {
		fmt.Fprintf(&b, "%.1f,%.1f ", f.x(xs[i]), f.y(ys[i]))
	}
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(f.w, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", color, dash, strings.TrimSpace(b.String()))
}

func drawTTFTCDF(w io.Writer, res *Result) {
	lo, hi := math.Inf(1), 0.0
	for _, p := range res.Order {
		t := res.Policies[p].TTFTsMs
		if len(t) > 0 {
			lo, hi = min(lo, t[0]), max(hi, t[len(t)-1])
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(max(lo, 1e-3))))
	hi = math.Pow(10, math.Ceil(math.Log10(max(hi, lo*10))))
	f := &frame{w: w, xmin: lo, xmax: hi, ymin: 0, ymax: 1, logX: true}
	f.begin(fmt.Sprintf("TTFT CDF — %d requests, %d workers", res.Requests, res.Workers), "time to first token (ms, log scale)", "fraction of requests")
	for v := lo; v <= hi*1.0001; v *= 10 {
		f.xtick(v, trimFloat(v))
	}
	for q := 0.0; q <= 1.0001; q += 0.25 {
		f.ytick(q, fmt.Sprintf("%.2f", q))
	}
	for i, p := range res.Order {
		t := res.Policies[p].TTFTsMs
		// At most ~400 points per curve: the CDF at evenly spaced ranks.
		step := max(1, len(t)/400)
		var xs, ys []float64
		for k := 0; k < len(t); k += step {
			xs, ys = append(xs, t[k]), append(ys, float64(k+1)/float64(len(t)))
		}
		if n := len(t); n > 0 {
			xs, ys = append(xs, t[n-1]), append(ys, 1)
		}
		c := palette[i%len(palette)]
		f.polyline(xs, ys, c, false)
		f.legend(i, p, c, false)
	}
	fmt.Fprintln(w, "</svg>")
}

func drawHitOverTime(w io.Writer, res *Result) {
	var tmax time.Duration
	for _, p := range res.Order {
		for _, h := range res.Policies[p].HitOverTime {
			tmax = max(tmax, h.At)
		}
	}
	// Seconds for a short replay (a live one is often under a minute),
	// minutes otherwise: the ticks should read as whole numbers of the unit.
	unit, unitName := time.Minute, "min"
	if tmax < 2*time.Minute {
		unit, unitName = time.Second, "s"
	}
	span := max(float64(tmax)/float64(unit), 1e-3)
	step := niceStep(span / 5)
	xmax := math.Ceil(span/step) * step
	clock := "simulated"
	if res.WallClock {
		clock = "wall clock"
	}
	f := &frame{w: w, xmin: 0, xmax: xmax, ymin: 0, ymax: 1}
	f.begin(fmt.Sprintf("Prefix-cache hit ratio over time — %d workers", res.Workers),
		fmt.Sprintf("arrival time (%s, %s)", unitName, clock), "cached prompt tokens / prompt tokens")
	for v := 0.0; v <= xmax+step/1000; v += step {
		f.xtick(v, trimFloat(v))
	}
	for q := 0.0; q <= 1.0001; q += 0.2 {
		f.ytick(q, fmt.Sprintf("%.1f", q))
	}
	for i, p := range res.Order {
		var xs, ys []float64
		for _, h := range res.Policies[p].HitOverTime {
			xs, ys = append(xs, float64(h.At)/float64(unit)), append(ys, h.HitRatio)
		}
		c := palette[i%len(palette)]
		f.polyline(xs, ys, c, false)
		f.legend(i, p, c, false)
	}
	f.polyline([]float64{0, xmax}, []float64{res.IdealHitRatio, res.IdealHitRatio}, "#000", true)
	f.legend(len(res.Order), fmt.Sprintf("ideal (%.3f)", res.IdealHitRatio), "#000", true)
	fmt.Fprintln(w, "</svg>")
}

// niceStep is the smallest of 1, 2, 2.5 or 5 × a power of ten at least
// raw: tick spacing a reader can add up.
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw*(1-1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// WriteSweepPlots writes ttft_p90_vs_load.svg and throughput_vs_load.svg
// into dir, one line per policy over the rates its sweep replayed, and
// returns the paths written.
func WriteSweepPlots(dir, prefix string, res *SweepResult) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot dir: %w", err)
	}
	var paths []string
	for _, c := range []struct {
		name string
		draw func(io.Writer, *SweepResult)
	}{{"ttft_p90_vs_load.svg", drawTTFTVsLoad}, {"throughput_vs_load.svg", drawThroughputVsLoad}} {
		var b strings.Builder
		c.draw(&b, res)
		path := filepath.Join(dir, prefix+c.name)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return paths, fmt.Errorf("plot %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func sweepRateRange(res *SweepResult) (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, p := range res.Policies {
		for _, pt := range p.Points {
			lo, hi = min(lo, pt.Rate), max(hi, pt.Rate)
		}
	}
	if math.IsInf(lo, 1) {
		return 0.5, 2
	}
	lo = math.Pow(2, math.Floor(math.Log2(lo)))
	hi = math.Pow(2, math.Ceil(math.Log2(max(hi, lo*2))))
	return lo, hi
}

func drawSweep(w io.Writer, res *SweepResult, f *frame, title, ylabel string, yticks func(), y func(SweepPoint) float64) {
	f.begin(title, "arrival rate (× the trace's, log scale)", ylabel)
	yticks()
	for v := f.xmin; v <= f.xmax*1.0001; v *= 2 {
		f.xtick(v, trimFloat(v))
	}
	for i, p := range res.Policies {
		var xs, ys []float64
		for _, pt := range p.Points {
			xs, ys = append(xs, pt.Rate), append(ys, y(pt))
		}
		c := policyColor(p.Policy)
		f.polyline(xs, ys, c, false)
		f.legend(i, fmt.Sprintf("%s (cap %.3g×)", p.Policy, p.Capacity), c, false)
	}
}

func drawTTFTVsLoad(w io.Writer, res *SweepResult) {
	lo, hi := sweepRateRange(res)
	ymax := res.TTFTSLAMs * 2
	for _, p := range res.Policies {
		for _, pt := range p.Points {
			ymax = max(ymax, pt.TTFTP90Ms)
		}
	}
	ymax = math.Pow(10, math.Ceil(math.Log10(max(ymax, 10))))
	f := &frame{w: w, xmin: lo, xmax: hi, ymin: 0, ymax: math.Log10(ymax), logX: true}
	// The y axis is log10(ms): TTFT spans milliseconds to minutes.
	yticks := func() {
		for e := 0.0; e <= f.ymax+1e-9; e++ {
			f.ytick(e, trimFloat(math.Pow(10, e)))
		}
	}
	drawSweep(w, res, f, fmt.Sprintf("TTFT p90 vs load — %s, %d workers", res.Trace, res.Workers), "TTFT p90 (ms, log scale)", yticks,
		func(pt SweepPoint) float64 { return math.Log10(max(pt.TTFTP90Ms, 1)) })
	sla := math.Log10(res.TTFTSLAMs)
	f.polyline([]float64{lo, hi}, []float64{sla, sla}, "#000", true)
	f.legend(len(res.Policies), fmt.Sprintf("SLA %.0f ms", res.TTFTSLAMs), "#000", true)
	fmt.Fprintln(w, "</svg>")
}

func drawThroughputVsLoad(w io.Writer, res *SweepResult) {
	lo, hi := sweepRateRange(res)
	ymax := 0.0
	for _, p := range res.Policies {
		for _, pt := range p.Points {
			ymax = max(ymax, pt.ThroughputRPS)
		}
	}
	ymax = max(1, ymax*1.1)
	f := &frame{w: w, xmin: lo, xmax: hi, ymin: 0, ymax: ymax, logX: true}
	yticks := func() {
		for k := 0; k <= 5; k++ {
			v := ymax * float64(k) / 5
			f.ytick(v, trimFloat(math.Round(v*10)/10))
		}
	}
	drawSweep(w, res, f, fmt.Sprintf("Throughput vs load — %s, %d workers", res.Trace, res.Workers), "completed requests / s", yticks,
		func(pt SweepPoint) float64 { return pt.ThroughputRPS })
	fmt.Fprintln(w, "</svg>")
}

// policyColor keeps a policy's colour the same on every sweep chart,
// whichever subset of policies it shows.
func policyColor(policy string) string {
	for i, q := range AllPolicies {
		if q == policy {
			return palette[i%len(palette)]
		}
	}
	return palette[len(palette)-1]
}
