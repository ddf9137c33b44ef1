package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/profiletest"
	"github.com/kvgate/kvgate/planner-sidecar/forecast"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newPolicy() *plan.SLA {
	m := profiletest.Model(perfmodel.Profile{
		Prefill: []perfmodel.PrefillPoint{
			{InputTokens: 500, Concurrency: 1, TTFTSeconds: 0.05, TokensPerSecond: 9000},
			{InputTokens: 500, Concurrency: 8, TTFTSeconds: 0.6, TokensPerSecond: 30000},
			{InputTokens: 4000, Concurrency: 1, TTFTSeconds: 0.3, TokensPerSecond: 13000},
			{InputTokens: 4000, Concurrency: 4, TTFTSeconds: 1.1, TokensPerSecond: 20000},
		},
		Decode: []perfmodel.DecodePoint{
			{ContextTokens: 1000, Batch: 1, ITLSeconds: 0.008, TokensPerSecond: 120},
			{ContextTokens: 1000, Batch: 64, ITLSeconds: 0.04, TokensPerSecond: 1600},
		},
	})
	cfg := plan.SLAConfig{
		TTFT: 500 * time.Millisecond, ITL: 30 * time.Millisecond, Horizon: 30 * time.Second,
		Pools:     map[string]plan.PoolLimits{plan.PoolPrefill: {Min: 1, Max: 8}, plan.PoolDecode: {Min: 1, Max: 8, GPUsPerReplica: 2}},
		GPUBudget: 18, DownAfter: 2, Cooldown: 20 * time.Second,
	}
	return plan.NewSLA(cfg, m, func() forecast.Forecaster { return forecast.NewKalman(0.05) })
}

// run drives a policy through a day-shaped load with a simulated fleet
// that follows its decisions (new replicas ready one interval later,
// drained ones idle the interval after) and journals every decision.
func run(t *testing.T, w *Writer, p plan.Policy) {
	t.Helper()
	ready := map[string][]string{plan.PoolPrefill: {"p-0"}, plan.PoolDecode: {"d-0"}}
	pending := map[string]int{}
	draining := map[string][]string{}
	next := 1
	for i := range 40 {
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		rate := 5 + 20*math.Sin(float64(i)/40*math.Pi) // up then down
		obs := plan.Observation{Time: now, Pools: map[string]plan.PoolObservation{}}
		for _, pool := range []string{plan.PoolPrefill, plan.PoolDecode} {
			obs.Pools[pool] = plan.PoolObservation{
				Replicas: len(ready[pool]), Pending: pending[pool], Draining: len(draining[pool]),
				Ready: append([]string(nil), ready[pool]...), Idle: append([]string(nil), draining[pool]...),
				RequestRate: rate, MeanInputTokens: 1500 + 10*float64(i), MeanOutputTokens: 200, CacheHitRate: 0.3,
				TTFTP90: time.Duration(200+10*i) * time.Millisecond, ITLP90: 20 * time.Millisecond,
			}
		}
		d := p.Decide(obs)
		if err := w.Append(Entry{Time: now, Policy: p.Name(), Advisory: true, Observation: obs, Decision: d}); err != nil {
			t.Fatal(err)
		}
		for _, pool := range []string{plan.PoolPrefill, plan.PoolDecode} {
			// Pending replicas become ready; removed ones go; drained ones
			// stop serving and are idle by the next observation.
			for range pending[pool] {
				ready[pool] = append(ready[pool], string(pool[0])+"-"+strconv.Itoa(next))
				next++
			}
			pending[pool] = 0
			draining[pool] = without(draining[pool], d.Remove[pool])
			for _, n := range d.Drain[pool] {
				ready[pool] = without(ready[pool], []string{n})
				draining[pool] = append(draining[pool], n)
			}
			if add := d.Active[pool] - len(ready[pool]); add > 0 {
				pending[pool] = add
			}
		}
	}
}

func without(s, drop []string) []string {
	var out []string
	for _, x := range s {
		keep := true
		for _, d := range drop {
			keep = keep && x != d
		}
		if keep {
			out = append(out, x)
		}
	}
	return out
}

func TestReplayReproducesDecisions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "planner.jsonl")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	run(t, w, newPolicy())
	w.Close()
	entries, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 40 {
		t.Fatalf("%d entries", len(entries))
	}
	// The run must exercise the interesting paths for the replay to mean much.
	var ups, downs, drains, removes int
	for _, e := range entries {
		for _, a := range e.Decision.Action {
			ups += b2i(a == "up")
			downs += b2i(a == "down")
		}
		drains += len(e.Decision.Drain)
		removes += len(e.Decision.Remove)
	}
	if ups == 0 || downs == 0 || drains == 0 || removes == 0 {
		t.Fatalf("run too tame: %d ups, %d downs, %d drains, %d removes", ups, downs, drains, removes)
	}
	if err := replay(entries, newPolicy()); err != nil {
		t.Fatal(err)
	}
	// A changed observation must be caught.
	entries[25].Observation.Pools[plan.PoolPrefill] = plan.PoolObservation{Replicas: 1, RequestRate: 500, MeanInputTokens: 4000}
	if err := replay(entries, newPolicy()); err == nil || !strings.Contains(err.Error(), "entry 26") {
		t.Fatalf("tampered journal replayed: %v", err)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestExplainAndAt(t *testing.T) {
	var buf bytes.Buffer
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, _ := Open(path)
	run(t, w, newPolicy())
	w.Close()
	entries, _ := ReadFile(path)
	e, ok := At(entries, t0.Add(95*time.Second))
	if !ok || !e.Time.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("At: %v %v", e.Time, ok)
	}
	if _, ok := At(entries, t0.Add(-time.Second)); ok {
		t.Fatal("At before the first entry found one")
	}
	last, _ := At(entries, time.Time{})
	if !last.Time.Equal(entries[len(entries)-1].Time) {
		t.Fatal("At(zero) is not the last entry")
	}
	Explain(&buf, e)
	out := buf.String()
	for _, want := range []string{"decision at 2026-01-01T00:01:30Z by planner — advisory", "pool prefill", "pool decode",
		"forecast_request_rate=", "decided:", "TTFT p90 290ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
}

func TestReadErrorsNameTheLine(t *testing.T) {
	in := `{"time":"2026-01-01T00:00:00Z","policy":"planner","advisory":true,"observation":{"Time":"2026-01-01T00:00:00Z","Pools":null},"decision":{"Time":"2026-01-01T00:00:00Z","Desired":null,"Active":null,"Action":null,"Drain":null,"Remove":null,"Reason":"","Terms":null},"applied":false}

{"time": 5}
`
	n := 0
	err := Read(strings.NewReader(in), func(Entry) error { n++; return nil })
	if err == nil || !strings.Contains(err.Error(), "line 3") || n != 1 {
		t.Fatalf("err %v after %d entries", err, n)
	}
	err = Read(strings.NewReader(`{"bogus":1}`), func(Entry) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatal(err)
	}
	long := strings.Repeat("x", MaxLineBytes+10)
	if err := Read(strings.NewReader(long), func(Entry) error { return nil }); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatal(err)
	}
}

func TestAppendDropsNonFiniteTerms(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, _ := Open(path)
	d := plan.Decision{Terms: map[string]float64{"a": 1, "b": math.NaN(), "c": math.Inf(1)}}
	if err := w.Append(Entry{Time: t0, Decision: d}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	data, _ := os.ReadFile(path)
	if !strings.Contains(string(data), `"Terms":{"a":1}`) {
		t.Fatalf("%s", data)
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"time":"2026-01-01T00:00:00Z","policy":"planner","decision":{"Desired":{"prefill":2},"Terms":{"prefill.need_replicas":1.5}}}` + "\n"))
	f.Add([]byte("{}\n{\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = Read(bytes.NewReader(data), func(e Entry) error {
			var buf bytes.Buffer
			Explain(&buf, e)
			return nil
		})
	})
}

// replay feeds the entries' observations, in order, through p (which must
// start in the state the journaled policy started in: freshly built from
// the same configuration) and reports the first entry whose decision
// differs from the journaled one.
func replay(entries []Entry, p plan.Policy) error {
	for i, e := range entries {
		got := p.Decide(e.Observation)
		// Compare as the journal stores it (JSON), so that empty and nil
		// maps, and the terms the writer drops, compare equal.
		a, err := normal(got)
		if err != nil {
			return err
		}
		b, err := normal(e.Decision)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(a, b) {
			return fmt.Errorf("journal entry %d (%s): replay decided %q, journal has %q", i+1, e.Time.Format(time.RFC3339), got.Reason, e.Decision.Reason)
		}
	}
	return nil
}

func normal(d plan.Decision) (any, error) {
	d.Terms = finite(d.Terms)
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	var v any
	err = json.Unmarshal(b, &v)
	return v, err
}
