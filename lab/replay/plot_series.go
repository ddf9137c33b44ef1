package replay

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

var polylinePoints = regexp.MustCompile(`<polyline [^>]*points="([^"]*)"`)

// CheckSVGSeries reports the first series (polyline) of a chart written by
// this package that would draw nothing readable: no points, a coordinate
// that is not a finite number, or all points at one x. A chart with no
// series at all is an error too. The plot writers' tests, here and in
// cmd/kvgate, run it on every file they write.
func CheckSVGSeries(svg []byte) error {
	lines := polylinePoints.FindAllSubmatch(svg, -1)
	if len(lines) == 0 {
		return errors.New("no series")
	}
	for i, m := range lines {
		pts := strings.Fields(string(m[1]))
		if len(pts) == 0 {
			return fmt.Errorf("series %d: no points", i)
		}
		xmin, xmax := math.Inf(1), math.Inf(-1)
		for _, p := range pts {
			xs, ys, ok := strings.Cut(p, ",")
			x, errX := strconv.ParseFloat(xs, 64)
			y, errY := strconv.ParseFloat(ys, 64)
			if !ok || errX != nil || errY != nil || math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) {
				return fmt.Errorf("series %d: point %q is not two finite numbers", i, p)
			}
			xmin, xmax = min(xmin, x), max(xmax, x)
		}
		if xmax <= xmin {
			return fmt.Errorf("series %d: %d points all at x=%g", i, len(pts), xmin)
		}
	}
	return nil
}
