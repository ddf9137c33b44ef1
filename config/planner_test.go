package config

import (
	"strings"
	"testing"
	"time"
)

func TestPlannerDefaultsAndFullSection(t *testing.T) {
	c, err := Parse(strings.NewReader(`
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
	p := c.Planner
	if p.Interval.D() != 5*time.Second || p.Targets.TTFT.D() != 300*time.Millisecond || len(p.Pools) != 2 ||
		p.Pools[0].Kubernetes.Group != "apps" || p.Pools[1].GPUsPerReplica != 1 || p.Forecaster.Kind != "kalman" ||
		p.Admin != "127.0.0.1:9410" || p.Correction.Alpha != 0.3 {
		t.Fatalf("%+v", p)
	}
	d := Default().Planner
	if d.Actuator.Kind != "advisory" || d.Forecaster.Kind != "holt" || d.Interval.D() != 10*time.Second {
		t.Fatalf("defaults: %+v", d)
	}
}

func TestPlannerValidationNamesThePath(t *testing.T) {
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
		_, err := Parse(strings.NewReader(in))
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
		if _, err := Parse(strings.NewReader(in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}
