package extprocconfig

import (
	"strings"
	"testing"
)

// Flow control is on by default with bounded queues; each key's range
// check names its path.
func TestFlowControlDefaultsAndRanges(t *testing.T) {
	var x Config
	x.ApplyDefaults()
	f := x.FlowControl
	if f.Disabled || f.MaxWait.D() != DefaultFlowMaxWait || f.MaxRequests != DefaultFlowMaxRequests || f.MaxBytes != DefaultBufferBudgetBytes/2 ||
		f.Saturation.MaxEngineWaiting != 5 || f.Saturation.MaxKVUsage != 0.8 || f.Saturation.MaxInflight != 0 {
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
