package extprocconfig

import (
	"strings"
	"testing"
	"time"
)

// Flow control is on by default with bounded queues; each key's range
// check names its path.
func TestFlowControlDefaultsAndRanges(t *testing.T) {
	var x Config
	x.ApplyDefaults()
	f := x.FlowControl
	if f.Disabled || f.MaxWait.D() != DefaultFlowMaxWait || f.MaxRequests != DefaultFlowMaxRequests || f.MaxBytes != DefaultBufferBudgetBytes/2 ||
		f.Saturation.MaxEngineWaiting != 2 || f.Saturation.MaxQueuedPrefillTokens != 16384 || f.Saturation.MaxKVUsage != 0.8 || f.Saturation.MaxInflight != 0 ||
		f.DeadlineHeader != "x-slo-ttft-ms" || f.DeadlineQueueShare != 0.75 || f.Saturation.PoolFraction != 1 ||
		f.Saturation.PoolMeanScore != 3 || f.Saturation.Judge().PoolMeanScore != 3 {
		t.Fatalf("flow_control defaults: %+v", f)
	}
	for name, tc := range map[string]struct {
		set  func(*FlowControl)
		want string
	}{
		"max_wait":     {func(f *FlowControl) { f.MaxWait = 1 }, "gw.flow_control.max_wait: 1ns outside [1ms, 10m]"},
		"max_requests": {func(f *FlowControl) { f.MaxRequests = -1 }, "gw.flow_control.max_requests: -1 outside"},
		"max_bytes":    {func(f *FlowControl) { f.MaxBytes = -5 }, "gw.flow_control.max_bytes: -5 outside"},
		"retry_after":  {func(f *FlowControl) { f.RetryAfter = 1000 }, "gw.flow_control.retry_after"},
		"recheck":      {func(f *FlowControl) { f.Recheck = 1 }, "gw.flow_control.recheck"},
		"tenant":       {func(f *FlowControl) { f.Tenant = "header:X-Tenant" }, `gw.flow_control.tenant: "header:X-Tenant"`},
		"tenant kind":  {func(f *FlowControl) { f.Tenant = "ip" }, `gw.flow_control.tenant: "ip"`},
		"kv usage":     {func(f *FlowControl) { f.Saturation.MaxKVUsage = 1.2 }, "gw.flow_control.saturation.max_kv_usage: 1.2 outside (0, 1]"},
		"inflight":     {func(f *FlowControl) { f.Saturation.MaxInflight = -1 }, "gw.flow_control.saturation.max_inflight"},
		"deadline hdr": {func(f *FlowControl) { f.DeadlineHeader = "X-SLO" }, `gw.flow_control.deadline_header: "X-SLO"`},
		"queue share":  {func(f *FlowControl) { f.DeadlineQueueShare = 1.5 }, "gw.flow_control.deadline_queue_share: 1.5 outside (0, 1]"},
		"share < 0":    {func(f *FlowControl) { f.DeadlineQueueShare = -0.1 }, "gw.flow_control.deadline_queue_share: -0.1"},
		"pool frac":    {func(f *FlowControl) { f.Saturation.PoolFraction = 2 }, "gw.flow_control.saturation.pool_fraction: 2 outside (0, 1]"},
		"pool mean":    {func(f *FlowControl) { f.Saturation.PoolMeanScore = -1 }, "gw.flow_control.saturation.pool_mean_score: -1 outside [0.1, 1000]"},
		"pool mean hi": {func(f *FlowControl) { f.Saturation.PoolMeanScore = 5000 }, "gw.flow_control.saturation.pool_mean_score: 5000 outside"},
	} {
		var x Config
		x.ApplyDefaults()
		tc.set(&x.FlowControl)
		if err := x.Validate("gw"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
	for _, ok := range []string{"", "user", "cache_salt", "api_key", "header:x-tenant"} {
		var x Config
		x.ApplyDefaults()
		x.FlowControl.Tenant = ok
		if err := x.Validate("gw"); err != nil {
			t.Errorf("tenant %q refused: %v", ok, err)
		}
	}
}

// A deadline header's value is whole milliseconds in [1, 1h]; anything
// else is an error that quotes (a bounded prefix of) the value.
func TestDeadlineOf(t *testing.T) {
	for v, want := range map[string]time.Duration{"2000": 2 * time.Second, " 1 ": time.Millisecond, "3600000": time.Hour} {
		if got, err := DeadlineOf(v); err != nil || got != want {
			t.Errorf("DeadlineOf(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "0", "-5", "1.5", "2s", "3600001", "99999999999999999999", "soon", strings.Repeat("9", 100)} {
		_, err := DeadlineOf(v)
		if err == nil || !strings.Contains(err.Error(), "want whole milliseconds in [1, 3600000]") {
			t.Errorf("DeadlineOf(%q): %v", v, err)
		}
		if err != nil && len(err.Error()) > 120 {
			t.Errorf("DeadlineOf(%q): an unbounded message (%d bytes)", v, len(err.Error()))
		}
	}
}

// A request waits its budget's share, never past max_wait; without a
// budget, max_wait. "none" reads no header.
func TestWaitLimit(t *testing.T) {
	var x Config
	x.ApplyDefaults()
	f := x.FlowControl
	for budget, want := range map[time.Duration]time.Duration{0: 10 * time.Second, 2 * time.Second: 1500 * time.Millisecond, time.Hour: 10 * time.Second} {
		if got := f.WaitLimit(budget); got != want {
			t.Errorf("WaitLimit(%v) = %v, want %v", budget, got, want)
		}
	}
	if !f.ReadsDeadline() {
		t.Fatal("the default reads no deadline header")
	}
	f.DeadlineHeader = FlowDeadlineNone
	if f.ReadsDeadline() {
		t.Fatal("none reads a header")
	}
	x.FlowControl = f
	if err := x.Validate("gw"); err != nil {
		t.Fatalf("deadline_header none refused: %v", err)
	}
}
