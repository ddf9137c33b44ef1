package main

import (
	"bytes"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const replayTestdataTrace = "../../lab/replay/testdata/conversation_head300.jsonl"

func TestReplayJSONPrintsExactlyOneObject(t *testing.T) {
	var out, errb bytes.Buffer
	code := dispatch([]string{"replay", "--trace", replayTestdataTrace, "--limit", "60", "--workers", "4", "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	dec := json.NewDecoder(&out)
	var doc map[string]json.RawMessage
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more output after the JSON object (%v)", err)
	}
	keys := func(m map[string]json.RawMessage) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	if got := keys(doc); !slices.Equal(got, []string{"ideal_hit_ratio", "policies", "pooled_lru_hit_ratio", "requests", "trace", "workers"}) {
		t.Fatalf("top-level keys %v", got)
	}
	var n struct{ Workers, Requests int }
	if err := json.Unmarshal(mustJSON(t, doc), &n); err != nil || n.Workers != 4 || n.Requests != 60 {
		t.Fatalf("workers/requests %+v %v", n, err)
	}
	var pols map[string]map[string]json.RawMessage
	if err := json.Unmarshal(doc["policies"], &pols); err != nil {
		t.Fatal(err)
	}
	wantPolicies := []string{"approx-prefix", "dynamo", "kvgate", "kvgate-events-only", "least-loaded", "llm-d", "random", "round-robin", "sglang"}
	var gotPolicies []string
	for p, fields := range pols {
		gotPolicies = append(gotPolicies, p)
		if got := keys(fields); !slices.Equal(got, []string{"e2e_p90_ms", "goodput_rps", "hit_ratio", "itl_p50_ms", "itl_p90_ms", "load_imbalance", "sla_attainment", "throughput_rps", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"}) {
			t.Errorf("%s: fields %v", p, got)
		}
		for k, v := range fields {
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				t.Errorf("%s.%s = %s: not a number", p, k, v)
			}
		}
	}
	slices.Sort(gotPolicies)
	if !slices.Equal(gotPolicies, wantPolicies) {
		t.Errorf("policies %v", gotPolicies)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReplayTableAndBadInput(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"replay", "--trace", replayTestdataTrace, "--limit", "30", "--policies", "round-robin,kvgate"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "round-robin") || !strings.Contains(out.String(), "ideal hit ratio") {
		t.Errorf("table:\n%s", out.String())
	}
	for _, args := range [][]string{
		{"replay", "--trace", replayTestdataTrace, "--policies", "bogus"},
		{"replay", "--trace", replayTestdataTrace, "--workers", "0"},
		{"replay", "--trace", "does-not-exist.jsonl"},
		{"replay", "--trace", replayTestdataTrace, "extra"},
	} {
		out.Reset()
		errb.Reset()
		if code := dispatch(args, nil, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

func TestReplaySweepReportsCapacityProgressAndPlots(t *testing.T) {
	var out, errb bytes.Buffer
	dir := t.TempDir()
	code := dispatch([]string{"replay", "--trace", replayTestdataTrace, "--limit", "40", "--workers", "2", "--sweep",
		"--policies", "round-robin,kvgate", "--ttft-sla", "3s", "--sweep-tolerance", "0.25", "--plot", dir, "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res struct {
		TTFTSLAMs float64 `json:"ttft_sla_ms"`
		Pooled    float64 `json:"pooled_lru_hit_ratio"`
		Policies  []struct {
			Policy   string
			Capacity float64
		}
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.TTFTSLAMs != 3000 || len(res.Policies) != 2 || res.Policies[0].Policy != "round-robin" || res.Policies[1].Capacity <= 0 {
		t.Fatalf("sweep %+v", res)
	}
	for _, want := range []string{"sweep round-robin ×1:", "sweep kvgate ×", "wrote " + filepath.Join(dir, "ttft_p90_vs_load.svg"), "wrote " + filepath.Join(dir, "throughput_vs_load.svg")} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	errb.Reset()
	if code := dispatch([]string{"replay", "--trace", replayTestdataTrace, "--sweep", "--rate-scale", "2"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--rate-scale") {
		t.Errorf("--sweep with --rate-scale: exit %d, %q", code, errb.String())
	}
}

// --term switches a kvgate term for one replay (a term's worth is one
// command): its column is printed, 0 when off; bad switches exit 2.
func TestReplayTermSwitch(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"replay", "--trace", replayTestdataTrace, "--limit", "40", "--workers", "4", "--policies", "dynamo,kvgate", "--term", "herd=off", "--term", "recompute=2"}
	if code := dispatch(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	if !strings.Contains(text, "kvgate terms switched: herd=off recompute=2") {
		t.Fatalf("no switch line:\n%s", text)
	}
	var header, kvgate []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "mean":
			header = f[len(f)-5:]
		case len(f) == 6 && f[0] == "kvgate":
			kvgate = f[1:]
		}
	}
	if !slices.Equal(header, []string{"prefill", "decode", "requests", "herd", "recompute"}) || len(kvgate) != 5 {
		t.Fatalf("term columns %v, kvgate row %v:\n%s", header, kvgate, text)
	}
	if kvgate[3] != "0.00" || kvgate[1] == "0.00" {
		t.Errorf("kvgate's herd column %s (switched off), decode %s:\n%s", kvgate[3], kvgate[1], text)
	}
	for _, bad := range []string{"herd", "nope=off", "decode=3"} {
		out.Reset()
		errb.Reset()
		if code := dispatch([]string{"replay", "--trace", replayTestdataTrace, "--term", bad}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--term") {
			t.Errorf("--term %s: exit %d, stderr %q", bad, code, errb.String())
		}
	}
}

// --overload finds kvgate-flow's capacity with abandoning clients and
// prints one Markdown row per multiple; --json gives the same as one
// object; bad multiples and clashing flags are refused.
func TestReplayOverloadSweep(t *testing.T) {
	args := []string{"replay", "--trace", replayTestdataTrace, "--workers", "2", "--policies", "round-robin,kvgate-flow", "--overload", "1,2", "--overload-span", "5s"}
	var out, errb bytes.Buffer
	if code := dispatch(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if rows := strings.Count(out.String(), "\n| "); rows != 3 || !strings.Contains(out.String(), "kvgate-flow's SLA capacity") {
		t.Fatalf("want a header and 2 rows:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "overload kvgate-flow ×") {
		t.Fatalf("no progress lines on stderr: %s", errb.String())
	}
	out.Reset()
	if code := dispatch(append(args, "--json"), nil, &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d", code)
	}
	var doc struct {
		Capacity   float64
		Capacities map[string]float64
		Rows       []struct {
			Multiple float64
			Results  map[string]map[string]any
		}
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Capacity <= 0 || len(doc.Rows) != 2 || doc.Rows[1].Multiple != 2 || len(doc.Capacities) != 2 {
		t.Fatalf("json %+v (%v)", doc, err)
	}
	for _, bad := range [][]string{
		{"--overload", "1,x"},
		{"--overload", "1", "--sweep"},
		{"--overload", "1", "--rate-scale", "2"},
		{"--overload", "200"},
		{"--overload", "1", "--abandon-after", "-1"},
		{"--overload", "1", "--policies", "round-robin"},
	} {
		errb.Reset()
		a := []string{"replay", "--trace", replayTestdataTrace, "--workers", "2"}
		if !slices.Contains(bad, "--policies") {
			a = append(a, "--policies", "round-robin,kvgate-flow")
		}
		if code := dispatch(append(a, bad...), nil, io.Discard, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", bad, code, errb.String())
		}
	}
}
