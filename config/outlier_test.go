package config

import (
	"strings"
	"testing"
	"time"
)

func TestOutlierDefaultsAndErrors(t *testing.T) {
	o := Default().Extproc.Outlier
	if o.Disabled || o.Consecutive5xx != 5 || o.ConsecutiveGatewayFailure != 5 || o.BaseEjectionTime.D() != 30*time.Second ||
		o.MaxEjectionTime.D() != 300*time.Second || o.MaxEjectionPercent != 50 || o.SlowStart.D() != 30*time.Second || o.SlowStartMinWeightPercent != 10 {
		t.Fatalf("defaults %+v", o)
	}
	c, err := Parse(strings.NewReader("extproc:\n  outlier: {consecutive_5xx: 3, base_ejection_time: 1s, max_ejection_time: 10s, slow_start_disabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Extproc.Outlier; o.Consecutive5xx != 3 || o.BaseEjectionTime.D() != time.Second || !o.SlowStartDisabled {
		t.Fatalf("parsed %+v", o)
	}
	for doc, want := range map[string]string{
		"extproc:\n  outlier: {consecutive_5xx: -1}\n":                            "extproc.outlier.consecutive_5xx",
		"extproc:\n  outlier: {consecutive_gateway_failure: 5000}\n":              "extproc.outlier.consecutive_gateway_failure",
		"extproc:\n  outlier: {base_ejection_time: 1m, max_ejection_time: 30s}\n": "extproc.outlier.max_ejection_time",
		"extproc:\n  outlier: {max_ejection_percent: 101}\n":                      "extproc.outlier.max_ejection_percent",
		"extproc:\n  outlier: {slow_start: 25h}\n":                                "extproc.outlier.slow_start",
		"extproc:\n  outlier: {slow_start_min_weight_percent: 200}\n":             "extproc.outlier.slow_start_min_weight_percent",
	} {
		_, err := Parse(strings.NewReader(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %s", doc, err, want)
		}
	}
}
