package enginesim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/kv/kvevents"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Model is the served model name; LoRAs are adapter names served too.
	Model string
	LoRAs []string
	// TokenizerDir is a Hugging Face model directory (tokenizer.json,
	// tokenizer_config.json with the chat template).
	TokenizerDir string
	// Engine configures the simulated core; Engine.OutputToken is set by
	// the server (the filler text).
	Engine Config
	// MaxModelLen bounds prompt + max_tokens (vLLM --max-model-len); 0
	// means the whole KV cache.
	MaxModelLen int
	// DefaultMaxTokens applies when a request gives none (16, the
	// completions API default).
	DefaultMaxTokens int
	Role             Role
	Transfer         TransferModel
	// Events configures KV-event publishing; an empty Endpoint disables it.
	Events EventsConfig
	// LegacyMetricNames also exports the names current vLLM no longer has
	// (vllm:gpu_cache_usage_perc, removed in v0.12; the deprecated
	// vllm:time_per_output_token_seconds), as an older release does.
	LegacyMetricNames bool
	DPRank            int
	// Seed makes request ids and the engine id reproducible.
	Seed uint64
	// SideChannelHost is the host a prefill worker advertises as
	// remote_host; empty means the listener's host.
	SideChannelHost string
	// KVHoldTimeout frees a prefill request's blocks that no decoder read
	// (vLLM VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s), in wall time before
	// the speed-up; 0 takes the default.
	KVHoldTimeout time.Duration
	Logger        *slog.Logger
}

// maxBodyBytes matches openai.DefaultLimits: bodies are bounded before the
// parser sees them.
var maxBodyBytes = int64(openai.DefaultLimits.MaxBodyBytes)

// Server is one simulated engine process: it wraps an Engine in what a
// router sees of a vLLM worker — vLLM's OpenAI HTTP API (chat and text
// completions, streamed or not, /v1/models, /health), its /metrics names,
// its KV events over ZMQ (kvstream.Publisher) and the NixlConnector P/D
// handshake (pd.go). Prompts are tokenized by kvgate's preprocess
// Registry, which renders chat templates and tokenizes exactly as vLLM
// does, so the blocks the engine caches are the blocks a router computes
// for the same request. The Engine runs against the wall clock
// (wallclock.go).
type Server struct {
	cfg      ServerConfig
	log      *slog.Logger
	reg      *preprocess.Registry
	model    *preprocess.Model
	filler   *filler
	clock    *clockedEngine
	events   *eventPublisher // nil without an events endpoint
	batches  chan kvevents.Batch
	metrics  *metrics
	mux      *http.ServeMux
	engineID string
	vocab    uint32 // token ids at or above it are rejected

	idMu  sync.Mutex
	idRNG *rand.Rand

	side       atomic.Pointer[sideChannel] // set by Serve
	notifier   *http.Client
	loopDone   chan struct{} // the engine loop has returned
	senderDone chan struct{} // the event sender has returned (nil without events)
	// eventsClosed stops onEvents after Close; guarded by clock.mu, under
	// which the core calls onEvents.
	eventsClosed bool
	runCtx       context.Context
	stopRun      context.CancelFunc
	closeOnce    sync.Once
	holdTimers   sync.Map // request id → *time.Timer
}

// sideChannel is where a decoder reaches this prefill worker.
type sideChannel struct {
	host string
	port int
}

// publishQueue bounds batches waiting for the ZMQ sender; when full the
// engine loop blocks, as vLLM's publisher queue does.
const publishQueue = 100_000

// NewServer loads the tokenizer, builds the engine, binds the KV-event
// sockets and starts the engine loop. Serve answers HTTP; Close stops it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Model == "" {
		return nil, errors.New("enginesim: a model name is required")
	}
	if cfg.Role == "" {
		cfg.Role = RoleAggregated
	}
	if _, err := ParseRole(string(cfg.Role)); err != nil {
		return nil, fmt.Errorf("enginesim: %w", err)
	}
	if cfg.DPRank < 0 {
		return nil, fmt.Errorf("enginesim: data-parallel rank %d is negative", cfg.DPRank)
	}
	if cfg.DefaultMaxTokens == 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.KVHoldTimeout == 0 {
		cfg.KVHoldTimeout = defaultAbortTimeout
	}
	if err := cfg.Engine.Validate(); err != nil {
		return nil, err
	}
	engCfg := cfg.Engine.withDefaults()
	capacity := engCfg.NumGPUBlocks * engCfg.BlockSize
	if cfg.MaxModelLen == 0 || cfg.MaxModelLen > capacity {
		if cfg.MaxModelLen > capacity {
			return nil, fmt.Errorf("enginesim: max model len %d is more than the KV cache holds (%d tokens)", cfg.MaxModelLen, capacity)
		}
		cfg.MaxModelLen = capacity
	}
	if cfg.MaxModelLen < 0 {
		return nil, fmt.Errorf("enginesim: max model len %d is negative", cfg.MaxModelLen)
	}
	reg, err := preprocess.New([]config.Model{{
		Name: cfg.Model, BlockSize: engCfg.BlockSize, Namespace: engCfg.Namespace,
		Tokenizer: cfg.TokenizerDir, LoRAs: cfg.LoRAs,
	}}, preprocess.Options{})
	if err != nil {
		return nil, fmt.Errorf("enginesim: %w", err)
	}
	model, _, _ := reg.Lookup(cfg.Model)
	s := &Server{
		cfg: cfg, log: cfg.Logger, reg: reg, model: model,
		filler:   newFiller(model.Tokenizer),
		idRNG:    rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.DPRank))),
		notifier: &http.Client{Timeout: 5 * time.Second},
	}
	s.vocab = uint32(model.Tokenizer.VocabSize())
	for _, t := range model.Tokenizer.AddedTokens() {
		s.vocab = max(s.vocab, uint32(t.ID)+1)
	}
	s.engineID = fmt.Sprintf("enginesim-%016x", s.idRNG.Uint64())
	engCfg.OutputToken = func(i int) uint32 { id, _ := s.filler.token(i); return id }
	var onEvents func([]kvevents.Event)
	if cfg.Events.Endpoint != "" {
		if s.events, err = newEventPublisher(cfg.Events, cfg.DPRank, cfg.Logger); err != nil {
			return nil, fmt.Errorf("enginesim: %w", err)
		}
		s.batches = make(chan kvevents.Batch, publishQueue)
		onEvents = func(evs []kvevents.Event) {
			if s.eventsClosed {
				return
			}
			// The batch is stamped when the step produced it, as vLLM's
			// scheduler stamps EventBatch.ts.
			s.batches <- kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: evs}
		}
	}
	eng, err := New(engCfg, onEvents)
	if err != nil {
		s.closeEvents()
		return nil, err
	}
	s.metrics = newMetrics(metricsConfig{
		Model: cfg.Model, Engine: "0", BlockSize: engCfg.BlockSize, NumGPUBlocks: engCfg.NumGPUBlocks,
		MaxLoRAs: len(cfg.LoRAs), LegacyNames: cfg.LegacyMetricNames,
	}, s.gauges)
	s.clock = newClockedEngine(eng, s.metrics.observeITL)
	s.runCtx, s.stopRun = context.WithCancel(context.Background())
	s.routes()
	s.loopDone = make(chan struct{})
	go func() {
		defer close(s.loopDone)
		s.clock.run(s.runCtx)
	}()
	if s.events != nil {
		s.senderDone = make(chan struct{})
		go func() {
			defer close(s.senderDone)
			s.sendBatches()
		}()
	}
	return s, nil
}

func (s *Server) sendBatches() {
	for b := range s.batches {
		s.events.publish(b)
	}
}

func (s *Server) closeEvents() {
	if s.events != nil {
		if err := s.events.close(); err != nil {
			s.log.Warn("closing KV event publisher", "err", err)
		}
	}
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /v1/completions", s.handleCompletion)
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /v1/responses", s.handleResponses)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("POST "+releasePath, s.handleRelease)
	mux.HandleFunc("GET "+debugCachePath, s.handleDebugCache)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &openai.Error{Status: http.StatusNotFound, Message: "no route " + r.Method + " " + r.URL.Path, Type: "NotFoundError"})
	})
	s.mux = mux
}

// Handler serves the HTTP API.
func (s *Server) Handler() http.Handler { return s.mux }

// EngineID is the id a prefill worker returns as remote_engine_id.
func (s *Server) EngineID() string { return s.engineID }

// EventsAddr is the bound KV-event PUB address, or the one it connects
// to ("" when disabled).
func (s *Server) EventsAddr() string {
	if s.events == nil || s.events.pub.Addr() == nil {
		return ""
	}
	return "tcp://" + s.events.pub.Addr().String()
}

// ReplayAddr is the bound replay ROUTER address ("" when disabled).
func (s *Server) ReplayAddr() string {
	if s.events == nil || s.events.pub.ReplayAddr() == nil {
		return ""
	}
	return "tcp://" + s.events.pub.ReplayAddr().String()
}

// ServerStats is a snapshot for tests and status pages.
type ServerStats struct {
	Engine        Stats
	Transferring  int   // decode requests waiting for their KV
	EventBatches  int64 // published KV-event batches
	EventFailures int64 // batches that could not be encoded or sent
}

// Stats returns a snapshot.
func (s *Server) Stats() ServerStats {
	st, tr := s.clock.stats()
	out := ServerStats{Engine: st, Transferring: tr}
	if s.events != nil {
		out.EventBatches, out.EventFailures = s.events.batches.Load(), s.events.failures.Load()
	}
	return out
}

func (s *Server) gauges() engineGauges {
	st, tr := s.clock.stats()
	return engineGauges{
		Running: st.Running, Waiting: st.Waiting + tr, KVUsage: st.KVUsage,
		PrefixQueries: int64(st.PrefixQueryTokens), PrefixHits: int64(st.PrefixHitTokens),
		RunningLoRAs: sortedKeys(st.RunningLoRAs), WaitingLoRAs: sortedKeys(st.WaitingLoRAs),
		Preemptions: int64(st.Preemptions), PromptTokens: int64(st.PromptTokens), GenerationTokens: int64(st.GenerationTokens),
		FinishedLength: int64(st.Finished), FinishedAbort: int64(st.Aborted),
	}
}

// Serve answers HTTP on ln until ctx ends, then shuts down gracefully:
// in-flight responses get up to drain to finish, then the engine and the
// KV-event sockets stop.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	host, portStr, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return fmt.Errorf("enginesim: listener address: %w", err)
	}
	port, _ := strconv.Atoi(portStr)
	if s.cfg.SideChannelHost != "" {
		host = s.cfg.SideChannelHost
	} else if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	s.side.Store(&sideChannel{host: host, port: port})
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return fmt.Errorf("enginesim: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	s.Close()
	return err
}

// Close stops the engine loop and the KV-event publisher. Requests still
// in flight are aborted by their handlers when their clients go away.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.stopRun()
		<-s.loopDone
		s.holdTimers.Range(func(_, v any) bool { v.(*time.Timer).Stop(); return true })
		if s.batches != nil {
			// Handlers may still abort requests; no event may follow the
			// channel's close.
			s.clock.mu.Lock()
			s.eventsClosed = true
			close(s.batches)
			s.clock.mu.Unlock()
			<-s.senderDone
		}
		s.closeEvents()
	})
}

// newRequestID returns vLLM-shaped ids: prefix + 32 hex digits.
func (s *Server) newRequestID(prefix string) string {
	s.idMu.Lock()
	a, b := s.idRNG.Uint64(), s.idRNG.Uint64()
	s.idMu.Unlock()
	return fmt.Sprintf("%s%016x%016x", prefix, a, b)
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	names := append([]string{s.cfg.Model}, s.cfg.LoRAs...)
	list := modelList{Object: "list"}
	for _, n := range names {
		parent := any(nil)
		if n != s.cfg.Model {
			parent = s.cfg.Model
		}
		list.Data = append(list.Data, modelCard{ID: n, Object: "model", Created: time.Now().Unix(), OwnedBy: "vllm",
			Root: s.cfg.Model, Parent: parent, MaxModelLen: s.cfg.MaxModelLen})
	}
	if err := writeJSON(w, http.StatusOK, list); err != nil {
		s.log.Warn("writing /v1/models", "err", err)
	}
}

// readBody reads a bounded request body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *openai.Error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &openai.Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body exceeds the %d-byte limit", maxBodyBytes), Type: "invalid_request_error", Code: "request_too_large"}
		}
		return nil, invalidRequest("", "reading request body: %v", err)
	}
	return body, nil
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
