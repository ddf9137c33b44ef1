package plannerconfig

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// parse decodes a document holding a planner: section the way config.Parse
// does (strict keys, then defaults, then validation under the key path
// "planner"), so the messages checked here are the file's. What only the
// whole document's decoder adds (config/decode_errors.go: a line and key
// path on a mistyped value) is checked in config/planner_test.go.
func parse(r io.Reader) (Config, error) {
	var file struct {
		Planner Config `yaml:"planner"`
	}
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	file.Planner.ApplyDefaults()
	if err := file.Planner.Validate("planner"); err != nil {
		return Config{}, err
	}
	return file.Planner, nil
}

// defaults is an omitted section with its defaults applied.
func defaults() Config {
	var x Config
	x.ApplyDefaults()
	return x
}

func TestDefaultsAndFullSection(t *testing.T) {
	p, err := parse(strings.NewReader(`
planner:
  interval: 5s
  targets: {ttft: 300ms, itl: 40ms}
  horizon: 2m
  gpu_budget: 16
  pools:
    - name: prefill
      min: 1
      max: 8
      gpus_per_replica: 2
      kubernetes: {kind: Deployment, name: vllm-prefill, namespace: llm}
      selector: 'role="prefill"'
    - name: decode
      min: 1
      max: 4
      kubernetes: {kind: StatefulSet, name: vllm-decode}
  forecaster: {kind: kalman, noise_ratio: 0.1}
  hysteresis: {up_utilization: 0.8, down_utilization: 0.6, down_after: 2}
  cooldown: 1m
  prometheus: {url: "http://prometheus:9090"}
  profile: /etc/kvgate/profile.json
  actuator: {kind: kubernetes}
  journal: /var/log/kvgate/planner.jsonl
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Interval.D() != 5*time.Second || p.Targets.TTFT.D() != 300*time.Millisecond || len(p.Pools) != 2 ||
		p.Pools[0].Kubernetes.Group != "apps" || p.Pools[1].GPUsPerReplica != 1 || p.Forecaster.Kind != "kalman" ||
		p.Admin != "127.0.0.1:9410" || p.Correction.Alpha != 0.3 {
		t.Fatalf("%+v", p)
	}
	d := defaults()
	if d.Actuator.Kind != "advisory" || d.Forecaster.Kind != "holt" || d.Interval.D() != 10*time.Second {
		t.Fatalf("defaults: %+v", d)
	}
}

func TestValidationNamesThePath(t *testing.T) {
	cases := map[string]string{
		`planner: {interval: 1ms}`:                                                                     "planner.interval:",
		`planner: {forecaster: {kind: arima}}`:                                                         "planner.forecaster.kind:",
		`planner: {pools: [{name: gpu, max: 1}]}`:                                                      "planner.pools[0].name:",
		`planner: {pools: [{name: prefill, min: 3, max: 2}]}`:                                          "planner.pools[0].max:",
		`planner: {pools: [{name: prefill, max: 2}, {name: prefill, max: 2}]}`:                         "planner.pools[1].name: duplicate",
		`planner: {pools: [{name: aggregated, max: 2}, {name: decode, max: 2}]}`:                       "planner.pools: aggregated",
		`planner: {gpu_budget: 1, pools: [{name: decode, min: 2, max: 2}]}`:                            "planner.gpu_budget:",
		`planner: {hysteresis: {up_utilization: 0.5, down_utilization: 0.8}}`:                          "planner.hysteresis.down_utilization:",
		`planner: {actuator: {kind: kubernetes}, pools: [{name: decode, max: 2}]}`:                     "planner.pools[0].kubernetes:",
		`planner: {actuator: {kind: file}}`:                                                            "planner.actuator.file:",
		`planner: {actuator: {kind: http, url: "ftp://x"}}`:                                            "planner.actuator.url:",
		`planner: {prometheus: {url: "prom:9090"}}`:                                                    "planner.prometheus.url:",
		`planner: {pools: [{name: decode, max: 2, kubernetes: {kind: Deployment, name: "Bad_Name"}}]}`: "planner.pools[0].kubernetes.name:",
		`planner: {pools: [{name: decode, max: 2, kubernetes: {kind: Rollout, name: x}}]}`:             "planner.pools[0].kubernetes.group:",
		`planner: {pools: [{name: decode, max: 2, endpoints: ["nohost"]}]}`:                            "planner.pools[0].endpoints[0]:",
		`planner: {admin: "x"}`:                                                                        "planner.admin:",
		`planner: {admin: ":9410"}`:                                                                    `planner.admin: ":9410" is not a loopback address and planner.admin_auth has no token`,
		`planner: {admin: ":9410", admin_auth: {token_env: KVGATE_TEST_UNSET_TOKEN}}`:                  "planner.admin_auth.token_env: environment variable KVGATE_TEST_UNSET_TOKEN is not set",
		`planner: {bogus: 1}`:                                                                          "bogus",
		`planner: {targets: {ttft: "-1s"}}`:                                                            "bad duration",
	}
	for in, want := range cases {
		_, err := parse(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want it to contain %q", in, err, want)
		}
	}
	// Exposed with a token, or deliberately without one: accepted.
	t.Setenv("KVGATE_TEST_PLANNER_TOKEN", "planner-admin-token-0123")
	for _, in := range []string{
		`planner: {admin: ":9410", admin_auth: {token_env: KVGATE_TEST_PLANNER_TOKEN}}`,
		`planner: {admin: ":9410", admin_auth: {allow_unauthenticated: true}}`,
	} {
		if _, err := parse(strings.NewReader(in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}

func TestTunedRulesDefaultsSetAndOff(t *testing.T) {
	// Omitted: the simulator's tuned values (planner-sidecar's build test
	// checks these constants against simulate.NewPlanner itself).
	d := defaults()
	if *d.ErrorHeadroom != 2 || d.PeakHold.D() != 150*time.Second || d.BacklogDrain.D() != 120*time.Second ||
		d.Forecaster.TrendDamping.D() != 10*time.Minute {
		t.Fatalf("defaults: k %v, peak_hold %v, backlog_drain %v, trend_damping %v",
			*d.ErrorHeadroom, d.PeakHold.D(), d.BacklogDrain.D(), d.Forecaster.TrendDamping.D())
	}
	p, err := parse(strings.NewReader(`
planner:
  error_headroom: 1.5
  peak_hold: 3m
  backlog_drain: 45s
  forecaster: {kind: holt, trend_damping: 20m}
`))
	if err != nil {
		t.Fatal(err)
	}
	if *p.ErrorHeadroom != 1.5 || p.PeakHold.D() != 3*time.Minute || p.BacklogDrain.D() != 45*time.Second ||
		p.Forecaster.TrendDamping.D() != 20*time.Minute {
		t.Fatalf("set: %v %v %v %v", *p.ErrorHeadroom, p.PeakHold.D(), p.BacklogDrain.D(), p.Forecaster.TrendDamping.D())
	}
	// An explicit 0 turns a rule off; it is not replaced by the default.
	p, err = parse(strings.NewReader(`
planner:
  error_headroom: 0
  peak_hold: 0s
  backlog_drain: "0"
  forecaster: {trend_damping: 0s}
`))
	if err != nil {
		t.Fatal(err)
	}
	if *p.ErrorHeadroom != 0 || p.PeakHold.D() != 0 || p.BacklogDrain.D() != 0 || p.Forecaster.TrendDamping.D() != 0 {
		t.Fatalf("off: %v %v %v %v", *p.ErrorHeadroom, p.PeakHold.D(), p.BacklogDrain.D(), p.Forecaster.TrendDamping.D())
	}
}

func TestTunedRulesAndScrapeValidation(t *testing.T) {
	cases := map[string]string{
		`planner: {error_headroom: -1}`:                     "planner.error_headroom: -1 is not in [0, 10]",
		`planner: {error_headroom: 11}`:                     "planner.error_headroom: 11 is not in [0, 10]",
		`planner: {error_headroom: .nan}`:                   "planner.error_headroom: NaN is not in [0, 10]",
		`planner: {peak_hold: 25h}`:                         "planner.peak_hold: must be at most 24h",
		`planner: {peak_hold: "-1s"}`:                       "bad duration",
		`planner: {backlog_drain: 25h}`:                     "planner.backlog_drain: must be at most 24h",
		`planner: {forecaster: {trend_damping: 48h}}`:       "planner.forecaster.trend_damping: must be at most 24h",
		`planner: {forecaster: {trend_damping: soon}}`:      "bad duration",
		`planner: {scrape: {token_file: /a, token_env: B}}`: "planner.scrape: set token_file or token_env, not both",
		`planner: {scrape: {token: x}}`:                     "token",
	}
	for in, want := range cases {
		_, err := parse(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want it to contain %q", in, err, want)
		}
	}
}

func TestScrapeToken(t *testing.T) {
	// The token file need not exist when the file is parsed (only the
	// planner's pod mounts it); Token reads it afresh each call.
	path := t.TempDir() + "/scrape-token"
	p, err := parse(strings.NewReader("planner: {scrape: {token_file: " + path + "}}"))
	if err != nil {
		t.Fatal(err)
	}
	s := p.Scrape
	if !s.Authenticated() {
		t.Fatal("token_file set but not Authenticated")
	}
	if _, err := s.Token(); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("missing file: %v", err)
	}
	for _, tok := range []string{"scrape-token-0123456789", "rotated-token-9876543210"} {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Token(); err != nil || got != tok {
			t.Fatalf("Token() = %q, %v; want %q", got, err, tok)
		}
	}
	os.WriteFile(path, []byte("short"), 0o600)
	if _, err := s.Token(); err == nil || strings.Contains(err.Error(), "short") {
		t.Fatalf("short token: err %v (must reject it without echoing it)", err)
	}
	t.Setenv("KVGATE_TEST_SCRAPE_TOKEN", "env-scrape-token-0123456789")
	e := Scrape{TokenEnv: "KVGATE_TEST_SCRAPE_TOKEN"}
	if got, err := e.Token(); err != nil || got != "env-scrape-token-0123456789" {
		t.Fatalf("env token %q, %v", got, err)
	}
	if (Scrape{}).Authenticated() {
		t.Fatal("no token source but Authenticated")
	}
}
