package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/e2e/enginesim"
	"github.com/kvgate/kvgate/e2e/replay"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/envoyharness"
	"github.com/kvgate/kvgate/extproc/modelfiles"
)

func init() {
	register("demo", command{
		summary: "local gateway demo on embedded defaults: simulated vLLM engines, kvgate extproc, a gateway on localhost:8080, a trace replay",
		run:     runGatewayDemo,
	})
}

type gatewayDemoOptions struct {
	engines   int
	listen    string
	trace     string
	requests  int
	duration  time.Duration
	speedup   float64
	exitAfter bool
}

func runGatewayDemo(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := gatewayDemoOptions{}
	fs.IntVar(&o.engines, "engines", 4, "simulated engines (1..16)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "gateway address (falls back to a free port when taken)")
	fs.StringVar(&o.trace, "trace", "", "Mooncake-format trace to replay (default: ../shared's conversation trace, else the slice in e2e/replay/testdata)")
	fs.IntVar(&o.requests, "requests", 120, "requests of the trace to replay (0..100000)")
	fs.DurationVar(&o.duration, "replay-duration", 20*time.Second, "compress the slice's arrivals into about this long")
	fs.Float64Var(&o.speedup, "speedup", 10, "engine speed-up over the simulated GPU timing model")
	fs.BoolVar(&o.exitAfter, "exit", false, "exit after the summary instead of serving until Ctrl-C")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.engines < 1 || o.engines > 16 || o.requests < 0 || o.requests > 100000 || o.speedup <= 0 {
		fmt.Fprintln(stderr, "kvgate demo: --engines 1..16, --requests 0..100000, --speedup > 0")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := gatewayDemo(ctx, stdout, o); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "kvgate demo: %v\n", err)
		return 1
	}
	return 0
}

const demoModel = "qwen3"

// gatewayDemo wires the whole system in one process, as it runs in a mesh:
// simulated vLLM engines (HTTP + ZMQ KV events) ← gateway (the Envoy
// harness, playing Envoy) ↔ kvgate extproc (gRPC ext_proc, in-memory index
// fed by the engines' events).
func gatewayDemo(ctx context.Context, out io.Writer, o gatewayDemoOptions) error {
	tokDir, err := modelfiles.Model(demoModel)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Components without a logger option log through the default; keep the
	// demo's output to what it prints itself.
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(quiet)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	cfg := config.Default()
	cfg.Models = []config.Model{{Name: demoModel, BlockSize: 64, Tokenizer: tokDir}}
	cfg.Extproc.Listen, cfg.Extproc.Admin = "127.0.0.1:0", "127.0.0.1:0"
	engines := make([]*enginesim.Server, o.engines)
	for i := range engines {
		s, err := enginesim.NewServer(enginesim.ServerConfig{
			Model: demoModel, TokenizerDir: tokDir, Seed: uint64(i + 1), Logger: quiet,
			Engine: enginesim.Config{BlockSize: 64, NumGPUBlocks: 2048, SpeedUp: o.speedup},
			Events: enginesim.EventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"},
		})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		engines[i] = s
		wg.Add(1)
		go func() { defer wg.Done(); s.Serve(runCtx, ln, time.Second) }()
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: ln.Addr().String(), Model: demoModel, DPRanks: 1, Role: "both",
			Events: s.EventsAddr(), Replay: s.ReplayAddr()})
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	type addrs struct{ grpc, admin net.Addr }
	ready := make(chan addrs, 1)
	routerc := make(chan *extproc.Router, 1)
	extErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		extErr <- serveExtproc(runCtx, cfg, extprocOptions{drain: time.Second, log: quiet,
			listening:   func(g, a net.Addr) { ready <- addrs{g, a} },
			routerReady: func(r *extproc.Router) { routerc <- r },
		})
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-extErr:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	router := <-routerc
	conn, err := grpc.NewClient(a.grpc.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	h, err := envoyharness.New(conn, envoyharness.DefaultConfig())
	if err != nil {
		return err
	}
	gln, err := net.Listen("tcp", o.listen)
	if err != nil {
		if gln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	gw := newHTTPServer(&envoyharness.Gateway{Harness: h, Logger: quiet})
	go gw.Serve(gln)
	defer gw.Close()
	base := "http://" + gln.Addr().String()

	fmt.Fprintf(out, "kvgate demo: %d simulated vLLM engines (%s, KV events over ZMQ), kvgate extproc on %s (in-memory index),\n", o.engines, demoModel, a.grpc)
	fmt.Fprintf(out, "and a gateway playing Envoy's side of ext_proc on %s. Metrics and recent decisions: http://%s/metrics, http://%s/debug/decisions\n\n", base, a.admin, a.admin)
	fmt.Fprintf(out, "Try it:\n  curl -s %s/v1/chat/completions -H 'content-type: application/json' -H 'x-kvgate-debug: 1' -D - \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":16}'\n\n", base, demoModel)

	if o.requests > 0 {
		if err := replaySlice(ctx, out, base, o, engines); err != nil {
			return err
		}
		st := router.Load().Stats()
		fmt.Fprintf(out, "kvgate accounting after the replay: %d requests begun, %d still open\n", st.Begun, st.Open)
	}
	if o.exitAfter {
		return nil
	}
	fmt.Fprintf(out, "\nThe gateway stays up at %s; Ctrl-C stops everything.\n", base)
	select {
	case <-ctx.Done():
	case err := <-extErr:
		return err
	}
	return nil
}

// replaySlice sends the first requests of a Mooncake trace through the
// gateway as token-id completions, arrivals compressed in time, and prints
// what the engines report: prefix-cached tokens and time to first token.
func replaySlice(ctx context.Context, out io.Writer, base string, o gatewayDemoOptions, engines []*enginesim.Server) error {
	path := o.trace
	if path == "" {
		path = demoTracePath()
	}
	reqs, err := replay.LoadTrace(path, o.requests)
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		return fmt.Errorf("trace %s: no requests", path)
	}
	span := time.Duration(reqs[len(reqs)-1].Timestamp-reqs[0].Timestamp) * time.Millisecond
	scale := 1.0
	if span > 0 {
		scale = float64(o.duration) / float64(span)
	}
	fmt.Fprintf(out, "Replaying %d requests of %s through the gateway (arrivals compressed %.0f×, engines %.0f× faster than the timing model)…\n", len(reqs), filepath.Base(path), 1/scale, o.speedup)
	type result struct {
		prompt, cached int
		ttft           time.Duration
		err            error
	}
	results := make([]result, len(reqs))
	start := time.Now()
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Minute}
	for i, r := range reqs {
		at := time.Duration(float64(time.Duration(r.Timestamp-reqs[0].Timestamp)*time.Millisecond) * scale)
		select {
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		case <-time.After(time.Until(start.Add(at))):
		}
		wg.Add(1)
		go func(i int, r replay.TraceRequest) {
			defer wg.Done()
			p, c, ttft, err := sendCompletion(ctx, client, base, replay.Tokens(nil, r), min(max(r.OutputLength, 1), 64))
			results[i] = result{p, c, ttft, err}
		}(i, r)
	}
	wg.Wait()
	var prompt, cached, failed int
	var ttfts []time.Duration
	for _, r := range results {
		if r.err != nil {
			failed++
			continue
		}
		prompt += r.prompt
		cached += r.cached
		ttfts = append(ttfts, r.ttft)
	}
	slices.Sort(ttfts)
	pct := func(p float64) time.Duration {
		if len(ttfts) == 0 {
			return 0
		}
		return ttfts[min(len(ttfts)-1, int(p*float64(len(ttfts))))]
	}
	fmt.Fprintf(out, "\nSummary: %d requests, %d failed, in %s\n", len(reqs), failed, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(out, "  prefix-cache hit ratio %.1f%% of prompt tokens (the trace slice's infinite-cache ideal: %.1f%%)\n",
		100*float64(cached)/float64(max(prompt, 1)), 100*replay.IdealHitRatio(reqs, 64))
	fmt.Fprintf(out, "  time to first token p50 %s, p90 %s, p99 %s (simulated engines, %.0f× speed-up)\n", pct(0.5).Round(time.Millisecond), pct(0.9).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), o.speedup)
	fmt.Fprintf(out, "  requests per engine:")
	for _, e := range engines {
		fmt.Fprintf(out, " %d", e.Stats().Engine.Finished)
	}
	fmt.Fprintln(out)
	if failed > 0 {
		for _, r := range results {
			if r.err != nil {
				return fmt.Errorf("%d of %d requests failed; first: %w", failed, len(reqs), r.err)
			}
		}
	}
	return nil
}

// sendCompletion streams one token-id completion and returns the prompt
// and cached token counts from the final usage chunk and the time to the
// first streamed token.
func sendCompletion(ctx context.Context, c *http.Client, base string, tokens []uint32, maxTokens int) (prompt, cached int, ttft time.Duration, err error) {
	body, _ := json.Marshal(map[string]any{"model": demoModel, "prompt": tokens, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("content-type", "application/json")
	t := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) || bytes.Equal(line, []byte("data: [DONE]")) {
			continue
		}
		if ttft == 0 {
			ttft = time.Since(t)
		}
		var chunk struct {
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal(line[len("data: "):], &chunk) == nil && chunk.Usage != nil {
			prompt = chunk.Usage.PromptTokens
			if chunk.Usage.PromptTokensDetails != nil {
				cached = chunk.Usage.PromptTokensDetails.CachedTokens
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, err
	}
	if prompt == 0 {
		return 0, 0, 0, errors.New("stream ended without a usage chunk")
	}
	return prompt, cached, ttft, nil
}

// demoTracePath prefers the full conversation trace beside the
// repository and falls back to the slice committed for tests.
func demoTracePath() string {
	dir, err := modelfiles.Dir() // <repo>/.cache/models
	if err == nil {
		root := filepath.Dir(filepath.Dir(dir))
		full := filepath.Join(root, "..", "shared", "traces", "mooncake", "conversation_trace.jsonl")
		if _, err := os.Stat(full); err == nil {
			return full
		}
		return filepath.Join(root, "e2e", "replay", "testdata", "conversation_head300.jsonl")
	}
	return filepath.Join("e2e", "replay", "testdata", "conversation_head300.jsonl")
}
