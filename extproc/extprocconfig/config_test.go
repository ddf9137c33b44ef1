package extprocconfig

import (
	"strings"
	"testing"
	"time"
)

// The section defaults and validates on its own, without config: the
// key paths in errors follow the path it is given (config passes
// "extproc"; config's tests check the whole document's messages).
func TestApplyDefaultsThenValidate(t *testing.T) {
	var x Config
	x.ApplyDefaults()
	if err := x.Validate("extproc"); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if x.Listen != DefaultListen || x.Fallbacks != DefaultFallbacks || x.TierWeights != DefaultTierWeights ||
		x.Streams.MaxOpen != DefaultMaxOpenStreams || x.HealthCheck.Path != DefaultHealthPath || x.Outlier.Consecutive5xx != 5 ||
		x.HealthyPanic.Percent() != DefaultHealthyPanicPercent {
		t.Fatalf("defaults: %+v", x)
	}
	if x.SharedLoad.TTL.D() != time.Second || x.GRPC.MaxConcurrentStreams != 1000 {
		t.Fatalf("composed defaults: shared_load %+v grpc %+v", x.SharedLoad, x.GRPC)
	}
}

func TestExplicitZeroFallbacksKept(t *testing.T) {
	if !FallbacksSet([]byte("extproc: {fallbacks: 0}")) || FallbacksSet([]byte("extproc: {policy: dynamo}")) {
		t.Fatal("FallbacksSet misreads the document")
	}
	var x Config
	x.KeepExplicitFallbacks()
	x.ApplyDefaults()
	if x.Fallbacks != 0 {
		t.Fatalf("explicit 0 replaced by %d", x.Fallbacks)
	}
}

func TestValidateNamesTheGivenPath(t *testing.T) {
	for name, tc := range map[string]struct {
		set  func(*Config)
		want string
	}{
		"own key":          {func(x *Config) { x.Policy = "maglev" }, `gw.policy: "maglev" is not one of dynamo, kvgate`},
		"streams":          {func(x *Config) { x.Streams.BufferBudgetBytes = 1024 }, "gw.streams.buffer_budget_bytes: 1024 is below gw.max_body_bytes"},
		"grpc":             {func(x *Config) { x.GRPC.KeepaliveTime = 1 }, "gw.grpc.keepalive_time"},
		"per-source share": {func(x *Config) { x.Streams.MaxOpenPerSourcePercent = 101 }, "gw.streams.max_open_per_source_percent: 101 outside [1, 100]"},
		"source header":    {func(x *Config) { x.Streams.SourceHeader = "X-Forwarded-For" }, `gw.streams.source_header: "X-Forwarded-For" must be a lower-case header name`},
		"body grace":       {func(x *Config) { x.Streams.BodyGrace = 1 }, "gw.streams.body_grace: 1ns outside [1s, request_timeout 2m0s]"},
		"outlier":          {func(x *Config) { x.Outlier.MaxEjectionPercent = 101 }, "gw.outlier.max_ejection_percent"},
		"healthy_panic":    {func(x *Config) { x.HealthyPanic.ThresholdPercent = 101 }, "gw.healthy_panic.threshold_percent: 101 outside [1, 100]"},
		"shared_load":      {func(x *Config) { x.SharedLoad.ReplicaID = "a b" }, "gw.shared_load.replica_id"},
		"debug_header":     {func(x *Config) { x.DebugHeader.TrustedSources = []string{"office"} }, "gw.debug_header.trusted_sources[0]"},
		"exposure":         {func(x *Config) { x.Listen = "0.0.0.0:9002" }, "gw.listen: \"0.0.0.0:9002\" is not a loopback address and gw.tls has no cert_file"},
	} {
		var x Config
		x.ApplyDefaults()
		tc.set(&x)
		if err := x.Validate("gw"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
}
