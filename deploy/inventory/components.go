package inventory

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/kvagent"
	"github.com/kvgate/kvgate/planner-sidecar"
)

// Sources, as listed in Family.Source.
const (
	SourceExtproc = "kvgate extproc"
	SourceIndexer = "kvgate indexer (also in extproc with the memory index)"
	SourceRuntime = "Go runtime and process (every kvgate process)"
	SourceVLLM    = "vLLM (as lab/enginesim serves it)"
	SourceSGLang  = "SGLang (read by extproc/enginemetrics)"
	SourceKvagent = "kvgate kvagent"
	SourcePlanner = "kvgate planner"
)

// sglangLabels are the labels SGLang's SchedulerMetricsCollector puts on
// its gauges (sglang/srt/metrics/collector.py: model_name, engine_type and
// the parallel ranks; dp_rank with data-parallel attention). kvgate reads
// these families but has no SGLang simulator to gather them from.
var sglangLabels = []string{"dp_rank", "engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"}

// Build instantiates every kvgate component's metrics on fresh registries
// and returns the inventory, plus the engine metrics kvgate scrapes. vllm
// is what a vLLM engine serves on /metrics, gathered by the caller (the
// tests pass lab/enginesim's MetricFamilies): this package is deploy
// tooling and must not import the workshop's simulators itself
// (internal/importrules).
func Build(vllm []*dto.MetricFamily) (*Inventory, error) {
	var all []Family
	engineFamilies := func() ([]Family, error) { return engineFamilies(vllm) }
	for _, part := range []func() ([]Family, error){extprocFamilies, indexerFamilies, runtimeFamilies, engineFamilies, kvagentFamilies, plannerFamilies} {
		fs, err := part()
		if err != nil {
			return nil, err
		}
		all = append(all, fs...)
	}
	return New(all)
}

// fleetConfig is a one-engine configuration: enough for every per-worker
// metric to have a worker to report on.
func fleetConfig() config.Config {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "m", BlockSize: 16}}
	cfg.Engines = []config.Engine{{Endpoint: "127.0.0.1:1", Model: "m", DPRanks: 1, Role: "both",
		Events: "tcp://127.0.0.1:2", Replay: "tcp://127.0.0.1:3"}}
	cfg.Extproc.HealthCheck.Disabled = false
	return cfg
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// extprocFamilies registers the router's metrics exactly as `kvgate
// extproc` does (Router.Register).
func extprocFamilies() ([]Family, error) {
	cfg := fleetConfig()
	dir, err := os.MkdirTemp("", "kvgate-inventory-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := writeTinyModel(dir); err != nil {
		return nil, err
	}
	cfg.Models[0].Tokenizer = dir
	reg, err := preprocess.New(cfg.Models, preprocess.Options{})
	if err != nil {
		return nil, err
	}
	idx, err := indexer.OpenIndex(context.Background(), cfg.Index)
	if err != nil {
		return nil, err
	}
	defer idx.Close()
	workers, err := cfg.Workers()
	if err != nil {
		return nil, err
	}
	router, err := extproc.NewRouter(extproc.RouterConfig{Extproc: cfg.Extproc, Workers: workers}, reg, idx, quiet)
	if err != nil {
		return nil, fmt.Errorf("extproc router: %w", err)
	}
	rec := newRecorder()
	if err := router.Register(rec); err != nil {
		return nil, fmt.Errorf("extproc metrics: %w", err)
	}
	return rec.describe(SourceExtproc)
}

// indexerFamilies registers the indexer service's collector (what `kvgate
// indexer` serves, and what extproc adds when it embeds the index).
func indexerFamilies() ([]Family, error) {
	cfg := fleetConfig()
	idx, err := indexer.OpenIndex(context.Background(), cfg.Index)
	if err != nil {
		return nil, err
	}
	defer idx.Close()
	workers, err := cfg.Workers()
	if err != nil {
		return nil, err
	}
	svc, err := indexer.New(indexer.ServiceConfig{Index: cfg.Index, Indexer: cfg.Indexer, Models: cfg.Models, Workers: workers}, idx, quiet)
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	rec := newRecorder()
	if err := rec.Register(svc.Collector()); err != nil {
		return nil, err
	}
	return rec.describe(SourceIndexer)
}

// runtimeFamilies are the Go and process collectors every kvgate process
// registers next to its own (daemon/extprocd/extproc.go, indexer/http.go).
func runtimeFamilies() ([]Family, error) {
	rec := newRecorder()
	if err := firstErr(rec.Register(collectors.NewGoCollector()), rec.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return nil, err
	}
	return rec.describe(SourceRuntime)
}

// engineFamilies are the engine metrics: vLLM's as the simulator serves
// them (mfs), and SGLang's families that kvgate reads. Every vLLM family
// kvgate reads must be one the simulator serves, or the demo and the e2e
// tests would not exercise it.
func engineFamilies(mfs []*dto.MetricFamily) ([]Family, error) {
	vllm, err := familiesFromGather(mfs, SourceVLLM)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(vllm)
	for _, name := range enginemetrics.ScrapedMetricNames() {
		switch {
		case strings.HasPrefix(name, "vllm:"):
			if !slices.ContainsFunc(vllm, func(f Family) bool { return f.Name == name }) {
				return nil, fmt.Errorf("extproc/enginemetrics reads %s but lab/enginesim does not serve it", name)
			}
		case strings.HasPrefix(name, "sglang:"):
			out = append(out, Family{Name: name, Type: TypeGauge, Labels: sglangLabels, Source: SourceSGLang,
				Help: "SGLang scheduler gauge read by kvgate's engine-metrics scraper."})
		default:
			return nil, fmt.Errorf("extproc/enginemetrics reads %s, from no known engine", name)
		}
	}
	return out, nil
}

var _ prometheus.Registerer = (*recorder)(nil)

// kvagentFamilies starts a real kvagent (store with host and disk tiers,
// engine connector on a Unix socket, peer transfers, residency events) on
// temporary paths and loopback ports, as `kvgate kvagent` does
// (daemon/kvagentd), and describes what it registered.
func kvagentFamilies() ([]Family, error) {
	dir, err := os.MkdirTemp("", "kvgate-inventory-kvagent-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg := config.Default()
	k := &cfg.Kvagent
	k.Socket = filepath.Join(dir, "kvagent.sock")
	k.ShmPath = filepath.Join(dir, "arena")
	k.BlockBytes = 4096
	k.HostBlocks = 4
	k.Disk.Dir = filepath.Join(dir, "disk")
	k.Disk.Blocks = 4
	k.Peer.Listen = "127.0.0.1:0"
	k.Peer.TransferListen = "127.0.0.1:0"
	// The events endpoint must name a port (config validation); a free
	// loopback one, taken from the kernel and released just before.
	events, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	k.Events = fmt.Sprintf("tcp://127.0.0.1:%d", events)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kvagent inventory config: %w", err)
	}
	rec := newRecorder()
	a, err := kvagent.Start(cfg.Kvagent, rec, quiet)
	if err != nil {
		return nil, fmt.Errorf("kvagent: %w", err)
	}
	fams, derr := rec.describe(SourceKvagent)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil && derr == nil {
		derr = fmt.Errorf("kvagent close: %w", err)
	}
	return fams, derr
}

// plannerFamilies describes the planner sidecar's metrics.
func plannerFamilies() ([]Family, error) {
	rec := newRecorder()
	for _, c := range plannersidecar.NewMetrics().Collectors() {
		if err := rec.Register(c); err != nil {
			return nil, fmt.Errorf("planner metrics: %w", err)
		}
	}
	return rec.describe(SourcePlanner)
}

// freeLoopbackPort asks the kernel for a free loopback port and releases it
// (the inventory is a tool the product links nothing of, and it may not
// import the workshop's test kits, lab/testkit/freeport among them).
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free loopback port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
