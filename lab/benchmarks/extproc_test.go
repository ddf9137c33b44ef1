package benchmarks

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/kvindex"
)

// The decision table: one row per index, prompt and concurrency, each with
// the floor measured in the same rounds and the rounds' ratio range.
func TestExtprocTableInterleavesTheFloor(t *testing.T) {
	var out strings.Builder
	indexes := map[string]kvindex.Index{
		"memory":  kvindex.NewMemory(kvindex.MemoryConfig{}),
		"memory2": kvindex.NewMemory(kvindex.MemoryConfig{}),
	}
	opt := ExtprocOptions{Phase: 20 * time.Millisecond, Rounds: 2, Concurrency: []int{1}, Workers: 4, Command: "test"}
	if err := Extproc(context.Background(), &out, indexes, opt); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	if !strings.Contains(report, "2 rounds per row") {
		t.Errorf("the report does not say how the floor was interleaved:\n%s", report)
	}
	row := regexp.MustCompile(`(?m)^\| (memory2?) \| ([^|]+) \| (\d+) \|.*\| ([0-9.]+)× \(([0-9.]+)–([0-9.]+)\) \|$`)
	rows := row.FindAllStringSubmatch(report, -1)
	// 4 prompts × 2 indexes, grouped by index.
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8:\n%s", len(rows), report)
	}
	for i, r := range rows {
		if want := []string{"memory", "memory2"}[i/4]; r[1] != want {
			t.Errorf("row %d is %s, want %s (rows grouped by index)", i, r[1], want)
		}
		ratio, _ := strconv.ParseFloat(r[4], 64)
		lo, _ := strconv.ParseFloat(r[5], 64)
		hi, _ := strconv.ParseFloat(r[6], 64)
		// Printed to 0.1: a round on a loaded machine can print 0.0.
		if !(ratio >= 0 && lo >= 0 && lo <= hi) {
			t.Errorf("row %q: ratio %g, rounds %g–%g", r[0], ratio, lo, hi)
		}
	}
}
