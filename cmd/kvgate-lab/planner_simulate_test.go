package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestPlannerSimulateJSON(t *testing.T) {
	var out, errb bytes.Buffer
	plots := t.TempDir()
	code := runPlannerSimulate([]string{"--shape", "sine", "--sine-duration", "4m", "--sine-period", "2m", "--sine-min-rate", "2", "--sine-max-rate", "8",
		"--isl", "800", "--osl", "20", "--warm-up", "1m", "--static", "1p1d,2p1d", "--json", "--plot", plots}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	// Exactly one JSON object, with exactly the documented members.
	dec := json.NewDecoder(&out)
	var v map[string]map[string]map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if dec.More() {
		t.Fatal("more than one JSON value printed")
	}
	if len(v) != 1 || v["policies"] == nil {
		t.Fatalf("top level %v, want only \"policies\"", v)
	}
	var names []string
	for name, p := range v["policies"] {
		names = append(names, name)
		var keys []string
		for k, x := range p {
			keys = append(keys, k)
			if _, ok := x.(float64); !ok {
				t.Errorf("%s.%s = %v, want a number", name, k, x)
			}
		}
		slices.Sort(keys)
		if want := []string{"gpu_hours", "itl_p90_ms", "scale_events", "sla_attainment", "ttft_p90_ms"}; !slices.Equal(keys, want) {
			t.Errorf("%s: members %v, want %v", name, keys, want)
		}
		if a := p["sla_attainment"].(float64); a < 0 || a > 1 {
			t.Errorf("%s: sla_attainment %v outside [0, 1]", name, a)
		}
	}
	slices.Sort(names)
	if want := []string{"planner", "static-1p1d", "static-2p1d", "threshold"}; !slices.Equal(names, want) {
		t.Errorf("policies %v, want %v", names, want)
	}
	// Progress: one line per fleet as it finishes, numbered, before the
	// summary line (issue 17: streamed, not all at the end).
	for i, name := range names {
		if !strings.Contains(errb.String(), "] "+name+": SLA attainment ") {
			t.Errorf("stderr has no progress line for %s:\n%s", name, errb.String())
		}
		if !strings.Contains(errb.String(), "planner-simulate: ["+strconv.Itoa(i+1)+"] ") {
			t.Errorf("stderr has no progress line [%d]:\n%s", i+1, errb.String())
		}
	}
	if p, d := strings.LastIndex(errb.String(), "] "), strings.Index(errb.String(), "simulations done in"); p < 0 || d < p {
		t.Errorf("the progress lines do not come before the summary:\n%s", errb.String())
	}
	for _, f := range []string{"gpus.png", "ttft_p90.png", "itl_p90.png", "load.png"} {
		b, err := os.ReadFile(filepath.Join(plots, f))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: not a PNG (%v)", f, err)
		}
	}
}

func TestPlannerSimulateBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,3\n2023-11-16 18:15:47,x,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shape", "square"}, `--shape "square"`},
		{[]string{"--shape", "azure", "--trace", bad}, bad + ":3: ContextTokens"},
		{[]string{"--shape", "sine", "--trace", bad}, "--trace is for"},
		{[]string{"--mode", "split"}, "--mode"},
		{[]string{"--static", "4x2"}, "--static"},
		{[]string{"--time-scale", "0"}, "time scale"},
		{[]string{"--sine-min-rate", "9", "--sine-max-rate", "1"}, "max rate"},
		{[]string{"--error-headroom", "11"}, "--error-headroom"},
		{[]string{"--trend-damping", "-1s"}, "--trend-damping"},
		{[]string{"--peak-memory", "-1s"}, "--peak-memory"},
	} {
		var out, errb bytes.Buffer
		if code := runPlannerSimulate(c.args, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
