package replay_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/replay"
	"github.com/kvgate/kvgate/lab/workload"
	"github.com/kvgate/kvgate/picker"
)

// A term switched off leaves its column zero at every pick, and the
// replay's outcome moves where the term had weighed in (a loaded fleet
// sharing prefixes: the recompute term keeps requests with their cache).
func TestReplayWithATermOff(t *testing.T) {
	mix, err := workload.Named("chat", 200)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(mix)
	if err != nil {
		t.Fatal(err)
	}
	run := func(terms ...string) *replay.PolicyResult {
		t.Helper()
		cfg := picker.DefaultConfig()
		for _, s := range terms {
			if err := replay.SwitchTerm(&cfg, s); err != nil {
				t.Fatal(err)
			}
		}
		res, err := replay.Run(context.Background(), "slice", reqs, replay.Options{Workers: 4, Seed: 3, RateScale: 4, Policies: []string{replay.PolicyKvgate}, Kvgate: &cfg})
		if err != nil {
			t.Fatal(err)
		}
		return res.Policies[replay.PolicyKvgate]
	}
	on, off := run(), run("recompute=off")
	if on.TermMeans["recompute"] <= 0 || on.TermMeans["prefill"] <= 0 || on.TermMeans["decode"] <= 0 {
		t.Fatalf("with every term on, mean columns %v: the recompute term never weighed in, the test proves nothing", on.TermMeans)
	}
	if off.TermMeans["recompute"] != 0 {
		t.Errorf("recompute=off: its mean column is %v", off.TermMeans["recompute"])
	}
	if len(off.TermMeans) != int(picker.NumTerms) {
		t.Errorf("term means %v: want one per listed term %v", off.TermMeans, replay.TermNames())
	}
	if on.HitRatio == off.HitRatio && on.TTFTP90Ms == off.TTFTP90Ms && on.LoadImbalance == off.LoadImbalance {
		t.Errorf("recompute=off replays exactly as with it on: %+v", off)
	}
	// A weight given as a number sets the term's weight; on after off
	// switches it back.
	same := run("recompute=off", "recompute=on")
	if same.HitRatio != on.HitRatio || same.TTFTP99Ms != on.TTFTP99Ms || same.TermMeans["recompute"] != on.TermMeans["recompute"] {
		t.Errorf("off then on differs from on: %+v vs %+v", same, on)
	}
}

func TestSwitchTermRefusesBadArguments(t *testing.T) {
	for arg, want := range map[string]string{
		"recompute":     "want NAME=off",
		"credit=off":    `unknown term "credit" (terms: prefill, decode, requests, herd, recompute)`,
		"herd=maybe":    `"maybe" is not off, on or a weight`,
		"decode=2":      "fixed weight of 1",
		"recompute=-1":  "outside [0, 1e+06]",
		"recompute=1e9": "outside [0, 1e+06]",
		"requests=NaN":  "outside [0, 1e+06]",
	} {
		cfg := picker.DefaultConfig()
		if err := replay.SwitchTerm(&cfg, arg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("replay.SwitchTerm(%q) = %v, want %q", arg, err, want)
		}
	}
	cfg := picker.DefaultConfig()
	if err := replay.SwitchTerm(&cfg, "herd=0.5"); err != nil || cfg.Kvgate.HerdWeight != 0.5 {
		t.Errorf("herd=0.5: %v, weight %v", err, cfg.Kvgate.HerdWeight)
	}
}
