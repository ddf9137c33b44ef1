package soakplot

import (
	"bufio"
	"flag"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var redraw = flag.String("redraw", "", "write the plot of testdata/soak_2026-12-01.md to this path (docs/soak.png: ../../docs/soak.png)")

// loadTable reads the soak table rows copied from BENCHMARKS.md.
func loadTable(t *testing.T) []Sample {
	t.Helper()
	f, err := os.Open("testdata/soak_2026-12-01.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Sample
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "| "), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		if len(cells) != 13 {
			t.Fatalf("row %q: %d cells", line, len(cells))
		}
		num := func(i int) float64 {
			if cells[i] == "n/a" {
				return math.NaN()
			}
			v, err := strconv.ParseFloat(cells[i], 64)
			if err != nil {
				t.Fatalf("row %q cell %d: %v", line, i, err)
			}
			return v
		}
		s := Sample{At: time.Duration(num(0)) * time.Second, RPS: num(1), DecisionP99Ms: num(2), OpenTickets: num(3),
			RSSMiB: map[string]float64{"extproc": num(5), "engine0": num(7), "engine1": num(9), "engine2": num(11)},
			// enginesim exports no Go runtime metrics: only the extproc's.
			Goroutines: map[string]float64{"extproc": num(6)}}
		out = append(out, s)
	}
	if len(out) != 10 {
		t.Fatalf("%d rows", len(out))
	}
	return out
}

// Every panel has data, one unit each, every series has every sample.
func TestPanelsHaveData(t *testing.T) {
	samples := loadTable(t)
	panels := Panels(samples)
	units := map[string]string{}
	for _, p := range panels {
		units[p.Title] = p.Unit
		if len(p.Series) == 0 {
			t.Errorf("panel %q has no series", p.Title)
		}
		for name, xy := range p.Series {
			if len(xy) != len(samples) {
				t.Errorf("panel %q series %q: %d points, want %d", p.Title, name, len(xy), len(samples))
			}
		}
	}
	want := map[string]string{"completed requests": "requests/s", "decision overhead p99": "ms", "open requests in the extproc": "requests",
		"resident memory": "MiB", "goroutines": "goroutines"}
	for title, unit := range want {
		if units[title] != unit {
			t.Errorf("panel %q: unit %q, want %q", title, units[title], unit)
		}
	}
	if len(units) != len(want) {
		t.Errorf("panels %v", units)
	}
	for _, p := range panels {
		if p.Title == "resident memory" && len(p.Series) != 4 {
			t.Errorf("memory series: %d, want extproc and three engines", len(p.Series))
		}
		if p.Title == "goroutines" && len(p.Series["extproc"]) != len(samples) {
			t.Errorf("goroutines: %v", p.Series)
		}
	}
}

// A quantity never scraped (all NaN) gets no panel rather than an empty one.
func TestPanelsDropEmpty(t *testing.T) {
	samples := loadTable(t)
	for i := range samples {
		samples[i].DecisionP99Ms = math.NaN()
		samples[i].Goroutines = nil
	}
	for _, p := range Panels(samples) {
		if p.Title == "decision overhead p99" || p.Title == "goroutines" {
			t.Errorf("panel %q drawn without data", p.Title)
		}
	}
	if err := Write(filepath.Join(t.TempDir(), "x.png"), "x", nil); err == nil {
		t.Error("Write with no samples succeeded")
	}
}

func TestWritePNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "soak.png")
	if *redraw != "" {
		path = *redraw
	}
	if err := Write(path, "kvgate soak, 10 min at a target of 1000 requests/s (every sixth 10-s sample, BENCHMARKS.md)", loadTable(t)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 pt wide at 96 dpi; three rows of 240 pt plus the title.
	if b := img.Bounds(); b.Dx() != 1333 || b.Dy() != 1000 {
		t.Errorf("size %v", b)
	}
}
