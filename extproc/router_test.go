package extproc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/poll"
	"github.com/kvgate/kvgate/picker"
)

var workers = []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}

type rig struct {
	router  *Router
	reg     *preprocess.Registry
	idx     *kvindex.Memory
	harness *envoyharness.Harness
	conn    *grpc.ClientConn
	hcfg    envoyharness.Config
}

// withWorkers replaces the harness's worker cluster endpoints (as EDS
// would after the fleet changed).
// routerConfig is what the composition points (daemon/extprocd,
// deploy/inventory) give NewRouter: cfg's sections and its engines expanded.
func routerConfig(t testing.TB, cfg config.Config) RouterConfig {
	t.Helper()
	workers, err := cfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	return RouterConfig{Extproc: cfg.Extproc, Workers: workers}
}

func (r *rig) withWorkers(t *testing.T, eps ...string) {
	t.Helper()
	h, err := envoyharness.New(r.conn, r.hcfg.WithWorkers(eps...))
	if err != nil {
		t.Fatal(err)
	}
	r.harness = h
}

// newRig runs the real request path (registry, index, picker, load view)
// behind the real ext_proc server on a loopback gRPC port, with the
// harness playing Envoy.
func newRig(t *testing.T, mutate func(*config.Config), hcfg envoyharness.Config) *rig {
	t.Helper()
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Extproc.MaxBodyBytes = 64 << 10
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: dir}}
	for _, w := range workers {
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: w, Model: "qwen3", DPRanks: 1, Role: "both", Events: "tcp://127.0.0.1:1"})
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg, err := preprocess.New(cfg.Models, preprocess.OptionsFor(cfg.Extproc.Preprocess, cfg.Extproc.MaxBodyBytes, ""))
	if err != nil {
		t.Fatal(err)
	}
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	router, err := NewRouter(routerConfig(t, cfg), reg, idx, log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(router, server.Config{MaxBodyBytes: cfg.Extproc.MaxBodyBytes, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// The workers are the worker cluster's endpoints, as EDS would deliver.
	var hosts []string
	for _, e := range cfg.Engines {
		hosts = append(hosts, e.Endpoint)
	}
	h, err := envoyharness.New(conn, hcfg.WithWorkers(hosts...))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{router: router, reg: reg, idx: idx, harness: h, conn: conn, hcfg: hcfg}
}

func chatBody(model, text string) []byte {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": true, "messages": []map[string]string{
		{"role": "system", "content": "You are a meticulous assistant who answers with care."},
		{"role": "user", "content": text},
	}})
	return b
}

func post(body []byte, headers ...envoyharness.Header) *envoyharness.Request {
	return &envoyharness.Request{Method: "POST", Path: "/v1/chat/completions", Body: body, ChunkSize: 1024,
		Headers: append([]envoyharness.Header{{Name: "content-type", Value: "application/json"}}, headers...)}
}

// The done-when of the extproc issue, through the harness: a chat request
// goes to the worker holding its prefix, a spoofed destination header is
// ignored, and the fallbacks travel in envoy.lb metadata.
func TestRoutesToPrefixHolderAndIgnoresSpoofedHeader(t *testing.T) {
	for _, mode := range []string{"full-duplex", "buffered"} {
		t.Run(mode, func(t *testing.T) {
			hcfg := envoyharness.DefaultConfig()
			if mode == "buffered" {
				hcfg = bufferedConfig()
			}
			// kvgate must ignore a spoofed header even behind an Envoy that
			// does not strip it (the shipped files do).
			hcfg.StripHeaders = nil
			r := newRig(t, nil, hcfg)
			body := chatBody("qwen3", strings.Repeat("Summarise the quarterly report for the board, section by section. ", 30))
			res, err := r.reg.Chat(body)
			if err != nil {
				t.Fatal(err)
			}
			holder := kvfleet.WorkerID{Endpoint: workers[1]}
			if err := r.idx.Store(context.Background(), holder, kvfleet.TierDevice, kvindex.ChainBlocks(res.Sequence)); err != nil {
				t.Fatal(err)
			}
			spoof := envoyharness.Header{Name: "x-gateway-destination-endpoint", Value: "203.0.113.9:80"}
			x, err := r.harness.Start(context.Background(), post(body, spoof, envoyharness.Header{Name: "x-prefiller-host-port", Value: "203.0.113.9:81"}))
			if err != nil {
				t.Fatal(err)
			}
			if x.Local != nil {
				t.Fatalf("local reply %d %s (%v)", x.Local.Status, x.Local.Body, x.Local.Err)
			}
			f := x.Forward
			if f.Upstream != workers[1] {
				t.Fatalf("routed to %q, want the prefix holder %s", f.Upstream, workers[1])
			}
			dest, _ := envoyharness.Get(f.Headers, "x-gateway-destination-endpoint")
			list := strings.Split(dest, ",")
			if list[0] != workers[1] {
				t.Fatalf("destination header %q, want kvgate's choice first", dest)
			}
			if v, ok := envoyharness.Get(f.Headers, "x-prefiller-host-port"); ok {
				t.Fatalf("client's x-prefiller-host-port %q survived", v)
			}
			if len(list) != 3 || list[1] == workers[1] || list[2] == workers[1] || list[1] == list[2] {
				t.Fatalf("fallbacks %v: want the two other workers", list[1:])
			}
			if !f.RouteCacheCleared {
				t.Fatal("route cache not cleared with the header mutation")
			}
			finishResponse(t, x, workers[1])
			waitIdle(t, r.router)
		})
	}
}

// bufferedConfig is envoy.yaml with BUFFERED request bodies and the
// response body not sent (a mode no shipped file uses, between
// envoy.yaml and envoy-buffered-failopen.yaml).
func bufferedConfig() envoyharness.Config {
	c := envoyharness.DefaultConfig()
	c.RequestBodyMode = filterv3.ProcessingMode_BUFFERED
	c.ResponseBodyMode = filterv3.ProcessingMode_NONE
	c.RequestTrailers, c.ResponseTrailers = false, false
	c.MessageTimeout = 5 * time.Second // generous: the machine is shared
	return c
}

// finishResponse plays the response from served: when that is not the
// first host, Envoy's retries made the cluster choose again until it came.
func finishResponse(t *testing.T, x *envoyharness.Exchange, served string) {
	t.Helper()
	for host := x.Forward.Upstream; host != served; {
		next, err := x.Forward.NextUpstream()
		if err != nil || x.Forward.Attempts() > 8 {
			t.Fatalf("the cluster never chose %s (%v)", served, err)
		}
		host = next
	}
	if _, err := x.RespondHeaders(200, []envoyharness.Header{{Name: "content-type", Value: "text/event-stream"}}, false); err != nil {
		t.Fatal(err)
	}
	if err := x.RespondBody([]byte("data: {\"choices\":[]}\n\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := x.RespondBody([]byte("data: [DONE]\n\n"), true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitIdle waits until kvgate's accounting has released every request.
func waitIdle(t *testing.T, r *Router) {
	t.Helper()
	poll.Until(t, "kvgate's accounting to release every request", 10*time.Second, func() error {
		if st := r.Load().Stats(); st.Open != 0 {
			return fmt.Errorf("load not released: %+v", st)
		}
		return nil
	})
}

func TestErrorsAreOpenAIJSONWithTheRightStatus(t *testing.T) {
	r := newRig(t, nil, envoyharness.DefaultConfig())
	cases := []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"malformed", []byte(`{"model":"qwen3","messages":[`), 400, ""},
		{"unknown model", chatBody("gpt-9", "hi"), 404, "model_not_found"},
		{"oversized", chatBody("qwen3", strings.Repeat("x", 70<<10)), 413, ""},
		{"bad message", []byte(`{"model":"qwen3","messages":[{"role":"user","content":[{"type":"nope"}]}]}`), 400, ""},
		// issue 15 item 6 and issue 17 item 8
		{"empty POST", nil, 400, ""},
		{"no model", []byte(`{"messages":[{"role":"user","content":"hi"}]}`), 400, ""},
		{"max_tokens 2^63-1", []byte(`{"model":"qwen3","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"hi"}]}`), 400, ""},
		{"own chat_template", []byte(`{"model":"qwen3","chat_template":"{{ 1 }}","messages":[{"role":"user","content":"hi"}]}`), 400, ""},
	}
	for _, c := range cases {
		x, err := r.harness.Start(context.Background(), post(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if x.Local == nil || x.Local.Status != c.status {
			t.Fatalf("%s: got %+v / %+v, want local reply %d", c.name, x.Local, x.Forward, c.status)
		}
		var e struct {
			Error struct {
				Message, Type string
				Code          *string
			}
		}
		if err := json.Unmarshal(x.Local.Body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Fatalf("%s: body %s is not OpenAI error JSON (%v)", c.name, x.Local.Body, err)
		}
		if c.code != "" && (e.Error.Code == nil || *e.Error.Code != c.code) {
			t.Fatalf("%s: code %v, want %s", c.name, e.Error.Code, c.code)
		}
		if ct, _ := envoyharness.Get(x.Local.Headers, "content-type"); ct != "application/json" {
			t.Fatalf("%s: content-type %q", c.name, ct)
		}
	}
	if open := r.router.Load().Stats().Open; open != 0 {
		t.Fatalf("rejected requests left %d tickets open", open)
	}
}

// Streams that die at any phase release what kvgate accounted for them.
func TestCancelledStreamsReleaseLoad(t *testing.T) {
	r := newRig(t, nil, envoyharness.DefaultConfig())
	body := chatBody("qwen3", strings.Repeat("A long question about distributed caches. ", 200))
	for _, cp := range []envoyharness.CancelPoint{envoyharness.CancelAfterHeaders, envoyharness.CancelMidBody, envoyharness.CancelAfterBody} {
		req := post(body)
		req.Cancel = cp
		x, err := r.harness.Start(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		<-x.Done()
		waitIdle(t, r.router)
	}
	phases := map[string]func(x *envoyharness.Exchange){
		"after routing":      func(x *envoyharness.Exchange) {},
		"after resp headers": func(x *envoyharness.Exchange) { x.RespondHeaders(200, nil, false) },
		"after first byte": func(x *envoyharness.Exchange) {
			x.RespondHeaders(200, nil, false)
			x.RespondBody([]byte("data: x\n\n"), false)
		},
		"upstream 503": func(x *envoyharness.Exchange) { x.RespondHeaders(503, nil, true) },
	}
	for name, phase := range phases {
		x, err := r.harness.Start(context.Background(), post(body))
		if err != nil {
			t.Fatal(err)
		}
		if x.Forward == nil {
			t.Fatalf("%s: not routed: %+v", name, x.Local)
		}
		if r.router.Load().Stats().Open == 0 {
			t.Fatalf("%s: routed request not accounted", name)
		}
		phase(x)
		x.Cancel()
		<-x.Done()
		waitIdle(t, r.router)
	}
	st := r.router.Load().Stats()
	if st.Begun < 4 || st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The index being unreachable degrades to load-only routing, never a 5xx.
func TestIndexFailureRoutesOnLoad(t *testing.T) {
	r := newRig(t, nil, envoyharness.DefaultConfig())
	r.router.idx = failingIndex{r.idx}
	x, err := r.harness.Start(context.Background(), post(chatBody("qwen3", "hello there")))
	if err != nil {
		t.Fatal(err)
	}
	if x.Forward == nil || x.Forward.Upstream == "" {
		t.Fatalf("not routed: %+v", x.Local)
	}
	finishResponse(t, x, x.Forward.Upstream)
}

type failingIndex struct{ kvindex.Index }

func (failingIndex) Match(context.Context, []uint64, *kvindex.Match) error {
	return fmt.Errorf("redis: connection refused")
}

func defaultHarnessConfig() envoyharness.Config { return envoyharness.DefaultConfig() }

// candidates is the gather stage alone: pool p's workers with match m, as
// a request would see them now (slow start's draw from a request's own
// random source).
func candidates(r *Router, p *pool, m *kvindex.Match) []picker.Candidate {
	rnd := r.rand.get()
	defer r.rand.put(rnd)
	return r.gatherer.gather(p.workers, m, nil, r.now(), rnd)
}

// matchNow is the match stage alone, into a buffer of its own.
func matchNow(r *Router, p *pool, chain []uint64, now time.Time) *kvindex.Match {
	m := new(kvindex.Match)
	r.match(context.Background(), p, chain, now, m)
	return m
}

// depthsIn is w's depths in m (zero when absent).
func depthsIn(m *kvindex.Match, w kvfleet.WorkerID) kvfleet.Depths {
	d, _ := m.Lookup(w)
	return d
}

func memberAt(endpoint string) kvfleet.Worker {
	// Events makes it an exact (not approximate) worker, as the members
	// these tests were written against; nothing dials it.
	return kvfleet.Worker{ID: kvfleet.WorkerID{Endpoint: endpoint}, Model: "qwen3", Role: kvfleet.RoleBoth, Events: "tcp://127.0.0.1:1"}
}

// A request kvgate cannot tokenize exactly (an image part: its placeholder
// tokens are model-specific) is routed on load, never refused.
func TestUntokenizableRequestIsRoutedNotRefused(t *testing.T) {
	r := newRig(t, nil, defaultHarnessConfig())
	body := []byte(`{"model":"qwen3","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`)
	x, err := r.harness.Start(context.Background(), post(body))
	if err != nil {
		t.Fatal(err)
	}
	if x.Forward == nil || x.Forward.Upstream == "" {
		t.Fatalf("not routed: %+v", x.Local)
	}
	finishResponse(t, x, x.Forward.Upstream)
}

// Conditional P/D: with prefill workers in the pool, a long uncached
// prompt is prefilled on a prefill worker (named in x-prefiller-host-port)
// and decoded on a decode worker; a short one stays aggregated.
func TestPrefillDecodeDisaggregation(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Extproc.PD.Enabled = true
		c.Extproc.PD.MinUncachedTokens = 256
		c.Engines[0].Role = "prefill"
		c.Engines[1].Role = "decode"
		c.Engines[2].Role = "decode"
	}, defaultHarnessConfig())
	// Decode workers with prefill work queued make the split pay: the
	// prefill worker is idle.
	for _, w := range workers[1:] {
		r.router.load.Begin(kvfleet.WorkerID{Endpoint: w}, 200000, 0, time.Now())
	}
	long := chatBody("qwen3", strings.Repeat("An uncached question about the contract's clauses. ", 120))
	x, err := r.harness.Start(context.Background(), post(long))
	if err != nil {
		t.Fatal(err)
	}
	if x.Forward == nil {
		t.Fatalf("not routed: %+v", x.Local)
	}
	pre, _ := envoyharness.Get(x.Forward.Headers, "x-prefiller-host-port")
	if pre != workers[0] || x.Forward.Upstream == workers[0] {
		t.Fatalf("long prompt: prefiller %q, decode %q; want prefill on %s and decode elsewhere", pre, x.Forward.Upstream, workers[0])
	}
	x.Cancel()
	<-x.Done()

	short := chatBody("qwen3", "hi")
	x, err = r.harness.Start(context.Background(), post(short))
	if err != nil {
		t.Fatal(err)
	}
	if pre, ok := envoyharness.Get(x.Forward.Headers, "x-prefiller-host-port"); ok {
		t.Fatalf("short prompt disaggregated to %s", pre)
	}
	if x.Forward.Upstream == workers[0] {
		t.Fatal("an aggregated request went to a prefill-only worker")
	}
	x.Cancel()
	<-x.Done()
}

// The picker's bounds are the parser's: a max_tokens the parser lets
// through can never make the picker refuse (issue 15: 2^63-1 came back as
// a 503 naming picker internals).
func TestOutputTokenBoundMatchesPicker(t *testing.T) {
	if openai.DefaultLimits.MaxOutputTokens > picker.MaxOutputTokens {
		t.Fatalf("openai accepts max_tokens up to %d, the picker only %d", openai.DefaultLimits.MaxOutputTokens, picker.MaxOutputTokens)
	}
	if c := config.Default(); c.Extproc.Preprocess.MaxOutputTokens > picker.MaxOutputTokens || c.Extproc.Preprocess.MaxPromptTokens > picker.MaxPromptTokens {
		t.Fatalf("config bounds %+v exceed the picker's", c.Extproc.Preprocess)
	}
}
