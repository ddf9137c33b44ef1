package config

import (
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/enginemetrics"
)

// extproc.discovery.kubernetes decodes into discovery's own declaration
// (kubeselect.Config), every key of the README's Helm example included;
// the keys it does not declare for the file stay unknown.
func TestDiscoverySectionIsDiscoverysConfig(t *testing.T) {
	c, err := Parse(strings.NewReader(`
extproc:
  discovery:
    kubernetes: {kubeconfig: /etc/kube, namespace: inference, label_selector: app=vllm, port: 8000, port_name: http,
                 events_port: 5557, replay_port: 5558, dp_ranks: 2, model_label: m, role_label: r, model: qwen3}
`))
	if err != nil {
		t.Fatal(err)
	}
	k := c.Extproc.Discovery.Kubernetes
	if k == nil || k.Kubeconfig != "/etc/kube" || k.Namespace != "inference" || k.LabelSelector != "app=vllm" || k.Port != 8000 ||
		k.PortName != "http" || k.EventsPort != 5557 || k.ReplayPort != 5558 || k.DPRanks != 2 || k.ModelLabel != "m" ||
		k.RoleLabel != "r" || k.Model != "qwen3" {
		t.Fatalf("%+v", k)
	}
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err = Parse(strings.NewReader("extproc:\n  discovery:\n    kubernetes: {namespace: x, debounce: 1s}\n"))
	if err == nil || !strings.Contains(err.Error(), "extproc.discovery.kubernetes.debounce: unknown key") {
		t.Errorf("debounce is not a file key: %v", err)
	}
}

// extproc.engine_metrics is the scraper's own Config: its defaults are the
// scraper's (declared once, in enginemetrics) and its runtime fields are no
// file keys.
func TestEngineMetricsSectionIsTheScrapers(t *testing.T) {
	d := Default().Extproc.EngineMetrics
	if d.Disabled || d.Interval.D() != enginemetrics.DefaultInterval || d.Staleness.D() != enginemetrics.DefaultStaleness {
		t.Fatalf("defaults %+v", d)
	}
	c, err := Parse(strings.NewReader("extproc:\n  engine_metrics: {disabled: true, interval: 1s, staleness: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Extproc.EngineMetrics; !m.Disabled || m.Interval.D() != time.Second || m.Staleness.D() != 5*time.Second {
		t.Fatalf("%+v", m)
	}
	_, err = Parse(strings.NewReader("extproc:\n  engine_metrics: {timeout: 1s}\n"))
	if err == nil || !strings.Contains(err.Error(), "extproc.engine_metrics.timeout: unknown key") {
		t.Errorf("timeout is not a file key: %v", err)
	}
}
