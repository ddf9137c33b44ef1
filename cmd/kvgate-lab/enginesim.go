package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/kv/kvstream"

	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/kvagent/connector"
	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

func init() {
	register("enginesim", cli.Command{
		Summary: "simulated vLLM engine: OpenAI API, /metrics, KV events over ZMQ, P/D roles (--listen, --model, …)",
		Run:     runEnginesim,
	})
}

// qwen3KVBytesPerToken is Qwen3-0.6B's KV size per token in bf16: 28
// layers × 8 KV heads × 128 dims × 2 (K and V) × 2 bytes.
const qwen3KVBytesPerToken = 28 * 8 * 128 * 2 * 2

func runEnginesim(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate-lab enginesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "HTTP listen address (host:port)")
	logFmt := fs.String("log-format", "json", "log lines as json or text")
	model := fs.String("model", "Qwen/Qwen3-0.6B", "served model name")
	loras := fs.String("loras", "", "comma-separated LoRA adapter names served too")
	tokDir := fs.String("tokenizer", "", "Hugging Face model directory with tokenizer.json and the chat template (default: the qwen3 files that 'make models' fetches)")
	blockSize := fs.Int("block-size", enginesim.DefaultBlockSize, "KV block size in tokens")
	gpuBlocks := fs.Int("gpu-blocks", enginesim.DefaultNumGPUBlocks, "KV cache capacity in blocks")
	maxSeqs := fs.Int("max-num-seqs", enginesim.DefaultMaxNumSeqs, "running sequences per step")
	maxBatched := fs.Int("max-num-batched-tokens", enginesim.DefaultMaxNumBatchedTokens, "tokens computed per step")
	maxModelLen := fs.Int("max-model-len", 0, "bound on prompt + max_tokens (0: the whole KV cache)")
	speedup := fs.Float64("speedup", 1, "divides every simulated step and transfer time")
	namespace := fs.String("namespace", "", "cache namespace mixed into block hashes (Dynamo cache_salt)")
	role := fs.String("role", "aggregated", "aggregated, prefill or decode (vLLM NixlConnector P/D)")
	kvBytes := fs.Int64("kv-bytes-per-token", qwen3KVBytesPerToken, "KV bytes per token, for P/D transfer time")
	gbps := fs.Float64("transfer-gbps", 100, "P/D KV transfer bandwidth in Gbit/s")
	sideHost := fs.String("side-channel-host", "", "host a prefill worker advertises as remote_host (default: the listen host)")
	evEndpoint := fs.String("kv-events-endpoint", "", "ZMQ PUB endpoint for KV events, e.g. tcp://*:5557 (empty: no events); offset by --dp-rank")
	evReplay := fs.String("kv-events-replay", "", "ZMQ ROUTER replay endpoint (empty: no replay); offset by --dp-rank")
	evTopic := fs.String("kv-events-topic", "", "topic frame of every KV-event message")
	evEncoding := fs.String("kv-events-encoding", "map", "KV event encoding: map (vLLM v0.26: batch array, events maps), array (msgspec array_like, older vLLM and SGLang) mapbatch, or trtllm (TensorRT-LLM's event list, for engines configured kind: trtllm)")
	evReplayLayout := fs.String("kv-events-replay-layout", "v0.26", "replay reply framing: v0.26 (topic frame, vllm#45177) or legacy (older vLLM, SGLang)")
	evLegacyFields := fs.Bool("kv-events-legacy-fields", false, "leave out group_idx and kv_cache_spec_kind (a vLLM before PR #40984)")
	evHybrid := fs.Bool("kv-events-hybrid-groups", false, "publish a second, sliding-window KV-cache group with the same hashes (a hybrid model)")
	evPlaceholders := fs.Bool("kv-events-offload-placeholders", false, "follow every GPU store with an OffloadingConnector CPU placeholder (token_ids [], block_size 0)")
	evConnect := fs.Bool("kv-events-connect", false, "connect the PUB socket to --kv-events-endpoint instead of binding it (an indexer in bind mode)")
	evSkipLive := fs.String("kv-events-skip-live", "", "comma-separated batch sequence numbers to keep for replay without sending them live (a forced gap; testing)")
	legacyMetrics := fs.Bool("legacy-metric-names", false, "also export vllm:gpu_cache_usage_perc and vllm:time_per_output_token_seconds (vLLM before v0.12)")
	dpRank := fs.Int("dp-rank", 0, "data-parallel rank (in event batches and the event ports)")
	seed := fs.Uint64("seed", 0, "seed for request and engine ids")
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM, how long in-flight requests may take to finish")
	kvagentSock := fs.String("kvagent", "", "a kvgate kvagent's connector socket: offload evicted GPU blocks there, onboard hits from it")
	h2dGBps := fs.Float64("kvagent-gbps", enginesim.DefaultHostToGPUGBps, "host-to-GPU copy bandwidth (GB/s) charged for blocks onboarded from the kvagent")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "kvgate-lab enginesim: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg, err := enginesimConfig(enginesimFlags{
		model: *model, loras: *loras, tokDir: *tokDir, blockSize: *blockSize, gpuBlocks: *gpuBlocks,
		maxSeqs: *maxSeqs, maxBatched: *maxBatched, maxModelLen: *maxModelLen, speedup: *speedup,
		namespace: *namespace, role: *role, kvBytes: *kvBytes, gbps: *gbps, sideHost: *sideHost,
		evEndpoint: *evEndpoint, evReplay: *evReplay, evTopic: *evTopic, evEncoding: *evEncoding,
		evReplayLayout: *evReplayLayout, evLegacyFields: *evLegacyFields, evHybrid: *evHybrid,
		evPlaceholders: *evPlaceholders, evConnect: *evConnect, legacyMetrics: *legacyMetrics, evSkipLive: *evSkipLive,
		dpRank: *dpRank, seed: *seed,
	})
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab enginesim: %v\n", err)
		return 2
	}
	if *drain <= 0 {
		fmt.Fprintf(stderr, "kvgate-lab enginesim: --drain must be positive, got %v\n", *drain)
		return 2
	}
	log, err := cli.NewProcessLogger(stderr, cli.LogFormat(*logFmt, ""))
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab enginesim: --log-format: %v\n", err)
		return 2
	}
	cfg.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *kvagentSock != "" {
		kc, err := dialKVAgent(ctx, *kvagentSock, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "kvgate-lab enginesim: --kvagent: %v\n", err)
			return 1
		}
		defer kc.Close()
		cfg.Engine.KVTier = enginesim.NewKVAgentTier(kc, cfg.Model, time.Second, cfg.Logger)
		cfg.Engine.HostToGPUGBps = *h2dGBps
		if err := cfg.Engine.Validate(); err != nil {
			fmt.Fprintf(stderr, "kvgate-lab enginesim: --kvagent-gbps: %v\n", err)
			return 2
		}
	}
	err = serveEnginesim(ctx, cfg, *listen, *drain, func(addr net.Addr, s *enginesim.Server) {
		fmt.Fprintf(stdout, "kvgate-lab enginesim: %s (%s) serving on http://%s", cfg.Model, cfg.Role, addr)
		if ev := s.EventsAddr(); ev != "" {
			fmt.Fprintf(stdout, ", KV events on %s", ev)
			if rep := s.ReplayAddr(); rep != "" {
				fmt.Fprintf(stdout, ", replay on %s", rep)
			}
		}
		fmt.Fprintln(stdout)
	})
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab enginesim: %v\n", err)
		return 1
	}
	return 0
}

type enginesimFlags struct {
	model, loras, tokDir                      string
	blockSize, gpuBlocks, maxSeqs, maxBatched int
	maxModelLen                               int
	speedup                                   float64
	namespace, role                           string
	kvBytes                                   int64
	gbps                                      float64
	sideHost, evEndpoint, evReplay, evTopic   string
	evEncoding, evReplayLayout, evSkipLive    string
	evLegacyFields, evHybrid, evPlaceholders  bool
	evConnect, legacyMetrics                  bool
	dpRank                                    int
	seed                                      uint64
}

// enginesimConfig checks the flags and turns them into a ServerConfig.
func enginesimConfig(f enginesimFlags) (enginesim.ServerConfig, error) {
	var cfg enginesim.ServerConfig
	role, err := enginesim.ParseRole(f.role)
	if err != nil {
		return cfg, fmt.Errorf("--role: %w", err)
	}
	enc, err := enginesim.ParseEncoding(f.evEncoding)
	if err != nil {
		return cfg, fmt.Errorf("--kv-events-encoding: %w", err)
	}
	replayLayout, err := kvstream.ParseReplayLayout(f.evReplayLayout)
	if err != nil {
		return cfg, fmt.Errorf("--kv-events-replay-layout: %w", err)
	}
	var skipLive []uint64
	for _, v := range strings.Split(f.evSkipLive, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cfg, fmt.Errorf("--kv-events-skip-live: %q is not a sequence number", v)
		}
		skipLive = append(skipLive, n)
	}
	switch {
	case f.model == "":
		return cfg, errors.New("--model must not be empty")
	case f.blockSize < 1, f.gpuBlocks < 1, f.maxSeqs < 1, f.maxBatched < 1:
		return cfg, errors.New("--block-size, --gpu-blocks, --max-num-seqs and --max-num-batched-tokens must be positive")
	case f.maxModelLen < 0:
		return cfg, fmt.Errorf("--max-model-len must not be negative, got %d", f.maxModelLen)
	case f.kvBytes < 0 || f.gbps < 0:
		return cfg, errors.New("--kv-bytes-per-token and --transfer-gbps must not be negative")
	case f.dpRank < 0:
		return cfg, fmt.Errorf("--dp-rank must not be negative, got %d", f.dpRank)
	case f.evReplay != "" && f.evEndpoint == "":
		return cfg, errors.New("--kv-events-replay needs --kv-events-endpoint")
	}
	dir := f.tokDir
	if dir == "" {
		if dir, err = modelfiles.Model("qwen3"); err != nil {
			return cfg, fmt.Errorf("--tokenizer not given and the default is missing: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return cfg, fmt.Errorf("--tokenizer: %w", err)
	}
	var loras []string
	for _, l := range strings.Split(f.loras, ",") {
		if l = strings.TrimSpace(l); l != "" {
			loras = append(loras, l)
		}
	}
	engine := enginesim.Config{
		BlockSize: f.blockSize, NumGPUBlocks: f.gpuBlocks, MaxNumSeqs: f.maxSeqs,
		MaxNumBatchedTokens: f.maxBatched, SpeedUp: f.speedup, Namespace: f.namespace,
	}
	if err := engine.Validate(); err != nil {
		return cfg, err
	}
	return enginesim.ServerConfig{
		Model: f.model, LoRAs: loras, TokenizerDir: dir, Engine: engine, MaxModelLen: f.maxModelLen,
		Role: role, Transfer: enginesim.TransferModel{BytesPerToken: f.kvBytes, Gbps: f.gbps},
		Events: enginesim.EventsConfig{Endpoint: f.evEndpoint, ReplayEndpoint: f.evReplay, Topic: f.evTopic, Encoding: enc,
			ReplayLayout: replayLayout, LegacyFields: f.evLegacyFields, HybridGroups: f.evHybrid,
			OffloadPlaceholders: f.evPlaceholders, Connect: f.evConnect, SkipLive: skipLive},
		LegacyMetricNames: f.legacyMetrics,
		DPRank:            f.dpRank,
		Seed:              f.seed,
		SideChannelHost:   f.sideHost,
	}, nil
}

// serveEnginesim runs one simulator until ctx ends, then drains.
func serveEnginesim(ctx context.Context, cfg enginesim.ServerConfig, listen string, drain time.Duration, listening func(net.Addr, *enginesim.Server)) error {
	s, err := enginesim.NewServer(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		s.Close()
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	if listening != nil {
		listening(ln.Addr(), s)
	}
	return s.Serve(ctx, ln, drain)
}

// dialKVAgent connects to a kvagent's connector socket, bounded in time.
func dialKVAgent(ctx context.Context, sock string, cfg enginesim.ServerConfig) (*connector.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return connector.Dial(ctx, sock, connector.Registration{Namespace: cfg.Model, TokensPerBlock: cfg.Engine.BlockSize})
}
