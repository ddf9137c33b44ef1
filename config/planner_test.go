package config

import (
	"strings"
	"testing"
	"time"
)

// The planner: section declares, defaults and validates itself
// (planner-sidecar/plannerconfig, whose tests check every key); these
// check that the file composes it: Parse and Default apply its defaults,
// its errors carry the key path "planner", and the document decoder's
// line-and-path messages reach into it.
func TestPlannerSectionComposed(t *testing.T) {
	d := Default().Planner
	if d.Actuator.Kind != "advisory" || d.Forecaster.Kind != "holt" || d.Interval.D() != 10*time.Second ||
		*d.ErrorHeadroom != 2 || d.PeakHold.D() != 150*time.Second {
		t.Fatalf("defaults: %+v", d)
	}
	c, err := Parse(strings.NewReader("planner: {interval: 5s, pools: [{name: decode, max: 2}]}"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Planner; p.Interval.D() != 5*time.Second || p.Pools[0].GPUsPerReplica != 1 || p.Admin != "127.0.0.1:9410" {
		t.Fatalf("parsed: %+v", p)
	}
	for in, want := range map[string]string{
		`planner: {interval: 1ms}`:         "planner.interval: must be in 100ms..1h",
		`planner: {pools: [{name: gpu}]}`:  `planner.pools[0].name: "gpu" is not one of prefill, decode, aggregated`,
		`planner: {error_headroom: lots}`:  `line 1: planner.error_headroom: want a number, got "lots"`,
		`planner: {peak_hold: soon}`:       `line 1: planner.peak_hold: bad duration "soon"`,
		`planner: {scrape: {token: x}}`:    "line 1: planner.scrape.token: unknown key",
		"planner:\n  forecaster: {a: 1}\n": "line 2: planner.forecaster.a: unknown key",
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want it to contain %q", in, err, want)
		}
	}
}
