package plannersim

import (
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/profiletest"
	"github.com/kvgate/kvgate/planner-sidecar/forecast"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

func TestNewPlannerDefaultsAndOff(t *testing.T) {
	model := profiletest.Model(perfmodel.Profile{
		Prefill: []perfmodel.PrefillPoint{{InputTokens: 1000, Concurrency: 1, TTFTSeconds: 0.1, TokensPerSecond: 10000}},
		Decode:  []perfmodel.DecodePoint{{ContextTokens: 1000, Batch: 8, ITLSeconds: 0.02, TokensPerSecond: 400}},
	})
	// Provisioning 120 s + interval 30 s: the horizon and the peak hold
	// are 150 s, the backlog drains within 120 s.
	p, err := NewPlanner(Config{}, model, "holt", forecast.Params{}, plan.SLAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c := p.(*plan.SLA).Config()
	if c.Horizon != 150*time.Second || c.PeakHold != 150*time.Second || c.BacklogDrain != 120*time.Second ||
		c.ErrorHeadroom != DefaultErrorHeadroom || c.UpUtilization != DefaultPlannerUp || c.DownUtilization != DefaultPlannerDown {
		t.Fatalf("defaults: %+v", c)
	}
	// Negative turns a rule off.
	p, err = NewPlanner(Config{}, model, "holt", forecast.Params{}, plan.SLAConfig{ErrorHeadroom: -1, PeakHold: -1, BacklogDrain: -1})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.(*plan.SLA).Config(); c.ErrorHeadroom != 0 || c.PeakHold != 0 || c.BacklogDrain != 0 {
		t.Fatalf("off: %+v", c)
	}
	if _, err := NewPlanner(Config{}, model, "holt", forecast.Params{TrendDamping: -time.Second}, plan.SLAConfig{}); err == nil {
		t.Fatal("negative trend damping accepted")
	}
}
