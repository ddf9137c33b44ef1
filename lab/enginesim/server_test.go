package enginesim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/ingest"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/kv/kvstream"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

const testModel = "Qwen/Qwen3-0.6B"

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

type testServer struct {
	*Server
	url string
}

func qwen3Dir(t *testing.T) string {
	t.Helper()
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("test model files: %v", err)
	}
	return dir
}

// startServer runs a simulator on a loopback port until the test ends.
func startServer(t *testing.T, edit func(*ServerConfig)) *testServer {
	t.Helper()
	cfg := ServerConfig{
		Model:        testModel,
		LoRAs:        []string{"adapter-a"},
		TokenizerDir: qwen3Dir(t),
		Engine:       Config{BlockSize: 16, NumGPUBlocks: 4096, SpeedUp: 200},
		Logger:       quietLog,
		Seed:         1,
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 2*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{Server: s, url: "http://" + ln.Addr().String()}
}

var client = &http.Client{Timeout: 30 * time.Second}

func post(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := client.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading body: %v", url, err)
	}
	return resp.StatusCode, out
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type wireResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage            *wireUsage     `json:"usage"`
	KVTransferParams map[string]any `json:"kv_transfer_params"`
}

var (
	testRegistryOnce sync.Once
	testRegistry     *preprocess.Registry
	testRegistryErr  error
)

// promptTokens tokenizes a request body independently of the server, with
// a Registry of its own.
func promptTokens(t *testing.T, chat bool, body any) []uint32 {
	t.Helper()
	testRegistryOnce.Do(func() {
		testRegistry, testRegistryErr = preprocess.New([]config.Model{{Name: testModel, BlockSize: 16, Tokenizer: qwen3Dir(t), LoRAs: []string{"adapter-a"}}}, preprocess.Options{})
	})
	reg, err := testRegistry, testRegistryErr
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(body)
	var res *preprocess.Result
	if chat {
		res, err = reg.Chat(b)
	} else {
		res, err = reg.Completion(b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res.Tokens
}

// isFiller reports whether text is a non-empty prefix of the filler text
// repeated: what the simulator promises to generate.
func isFiller(text string) bool {
	if text == "" {
		return false
	}
	rep := strings.Repeat(fillerText, len(text)/len(fillerText)+2)
	return strings.HasPrefix(rep, text)
}

func chatBody(content string, extra map[string]any) map[string]any {
	b := map[string]any{"model": testModel, "messages": []map[string]any{{"role": "user", "content": content}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func TestChatCompletionNonStreaming(t *testing.T) {
	s := startServer(t, nil)
	body := chatBody("Tell me about prefix caching.", map[string]any{"max_tokens": 7})
	status, out := post(t, s.url+"/v1/chat/completions", body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, out)
	}
	r := decode[wireResponse](t, out)
	if r.Object != "chat.completion" || r.Model != testModel || !strings.HasPrefix(r.ID, "chatcmpl-") {
		t.Errorf("envelope: object %q model %q id %q", r.Object, r.Model, r.ID)
	}
	if len(r.Choices) != 1 || r.Choices[0].Message == nil {
		t.Fatalf("choices: %s", out)
	}
	c := r.Choices[0]
	if c.Message.Role != "assistant" || !isFiller(c.Message.Content) || c.FinishReason == nil || *c.FinishReason != "length" {
		t.Errorf("choice: role %q content %q finish %v", c.Message.Role, c.Message.Content, c.FinishReason)
	}
	want := len(promptTokens(t, true, body))
	u := r.Usage
	if u == nil || u.PromptTokens != want || u.CompletionTokens != 7 || u.TotalTokens != want+7 || u.PromptTokensDetails == nil {
		t.Fatalf("usage %+v, want prompt %d completion 7 with details", u, want)
	}
	if u.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("first request on a fresh engine reports %d cached tokens", u.PromptTokensDetails.CachedTokens)
	}
}

// sseEvents reads a text/event-stream body: the data of each event.
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	var events []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", line)
		}
		events = append(events, data)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	return events
}

func postStream(t *testing.T, url string, body any) []string {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := client.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		out, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content type %q", ct)
	}
	return sseEvents(t, resp.Body)
}

func TestChatCompletionStreaming(t *testing.T) {
	s := startServer(t, nil)
	body := chatBody("Stream me something.", map[string]any{
		"max_completion_tokens": 9, "stream": true, "stream_options": map[string]any{"include_usage": true}})
	events := postStream(t, s.url+"/v1/chat/completions", body)
	if len(events) < 4 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q: want chunks then [DONE]", events)
	}
	chunks := events[:len(events)-1]
	first := decode[wireResponse](t, []byte(chunks[0]))
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta == nil || first.Choices[0].Delta.Role == nil || *first.Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk %s: want the assistant role", chunks[0])
	}
	usageChunk := decode[wireResponse](t, []byte(chunks[len(chunks)-1]))
	if len(usageChunk.Choices) != 0 || usageChunk.Usage == nil {
		t.Fatalf("last chunk %s: want the usage chunk", chunks[len(chunks)-1])
	}
	var text strings.Builder
	contentChunks := 0
	for i, c := range chunks[1 : len(chunks)-1] {
		r := decode[wireResponse](t, []byte(c))
		if r.ID != first.ID || r.Usage != nil || len(r.Choices) != 1 || r.Choices[0].Delta == nil {
			t.Fatalf("chunk %d: %s", i+1, c)
		}
		if d := r.Choices[0].Delta.Content; d != nil {
			text.WriteString(*d)
			contentChunks++
		}
		last := i == len(chunks)-3
		fr := r.Choices[0].FinishReason
		if last != (fr != nil) || (fr != nil && *fr != "length") {
			t.Errorf("chunk %d (last %v): finish_reason %v", i+1, last, fr)
		}
	}
	if contentChunks != 9 || !isFiller(text.String()) {
		t.Errorf("%d content chunks with text %q, want 9 filler tokens", contentChunks, text.String())
	}
	want := len(promptTokens(t, true, body))
	if u := usageChunk.Usage; u.PromptTokens != want || u.CompletionTokens != 9 || u.TotalTokens != want+9 {
		t.Errorf("usage %+v, want prompt %d completion 9", u, want)
	}
}

func TestCompletions(t *testing.T) {
	s := startServer(t, nil)
	t.Run("text non-streaming", func(t *testing.T) {
		body := map[string]any{"model": testModel, "prompt": "Once upon a time", "max_tokens": 5}
		status, out := post(t, s.url+"/v1/completions", body)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, out)
		}
		r := decode[wireResponse](t, out)
		if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || len(r.Choices) != 1 || r.Choices[0].Text == nil {
			t.Fatalf("response %s", out)
		}
		if !isFiller(*r.Choices[0].Text) || r.Choices[0].FinishReason == nil || *r.Choices[0].FinishReason != "length" {
			t.Errorf("choice %s", out)
		}
		want := len(promptTokens(t, false, body))
		if u := r.Usage; u == nil || u.PromptTokens != want || u.CompletionTokens != 5 || u.PromptTokensDetails == nil {
			t.Errorf("usage %+v, want prompt %d completion 5", u, want)
		}
	})
	t.Run("token ids default max_tokens", func(t *testing.T) {
		prompt := []int{}
		for i := range 40 {
			prompt = append(prompt, 1000+i)
		}
		status, out := post(t, s.url+"/v1/completions", map[string]any{"model": testModel, "prompt": prompt})
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, out)
		}
		r := decode[wireResponse](t, out)
		if u := r.Usage; u == nil || u.PromptTokens != 40 || u.CompletionTokens != 16 {
			t.Errorf("usage %+v, want 40 prompt tokens and the default 16 completion tokens", u)
		}
	})
	t.Run("streaming", func(t *testing.T) {
		body := map[string]any{"model": "adapter-a", "prompt": "Stream a completion", "max_tokens": 4, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}
		events := postStream(t, s.url+"/v1/completions", body)
		// 4 token chunks, the usage chunk, [DONE].
		if len(events) != 6 || events[5] != "[DONE]" {
			t.Fatalf("events %q", events)
		}
		var text strings.Builder
		for i, e := range events[:4] {
			r := decode[wireResponse](t, []byte(e))
			if r.Object != "text_completion" || r.Model != "adapter-a" || len(r.Choices) != 1 || r.Choices[0].Text == nil {
				t.Fatalf("chunk %d: %s", i, e)
			}
			text.WriteString(*r.Choices[0].Text)
			if fr := r.Choices[0].FinishReason; (i == 3) != (fr != nil) {
				t.Errorf("chunk %d finish_reason %v", i, fr)
			}
		}
		if !isFiller(text.String()) {
			t.Errorf("text %q", text.String())
		}
		u := decode[wireResponse](t, []byte(events[4]))
		if u.Usage == nil || u.Usage.CompletionTokens != 4 || len(u.Choices) != 0 {
			t.Errorf("usage chunk %s", events[4])
		}
	})
	t.Run("streaming without usage", func(t *testing.T) {
		events := postStream(t, s.url+"/v1/completions", map[string]any{"model": testModel, "prompt": "x y z", "max_tokens": 3, "stream": true})
		if len(events) != 4 || events[3] != "[DONE]" {
			t.Fatalf("events %q: want 3 chunks and [DONE]", events)
		}
		for _, e := range events[:3] {
			if strings.Contains(e, `"usage"`) {
				t.Errorf("chunk %s carries usage without include_usage", e)
			}
		}
	})
}

func TestRepeatedPromptIsCached(t *testing.T) {
	s := startServer(t, nil)
	long := strings.Repeat("The router should send this long shared system prompt to the same worker. ", 20)
	body := chatBody(long, map[string]any{"max_tokens": 3})
	var cached [2]int
	for i := range cached {
		status, out := post(t, s.url+"/v1/chat/completions", body)
		if status != http.StatusOK {
			t.Fatalf("request %d: status %d: %s", i, status, out)
		}
		r := decode[wireResponse](t, out)
		cached[i] = r.Usage.PromptTokensDetails.CachedTokens
	}
	prompt := len(promptTokens(t, true, body))
	if cached[0] != 0 || cached[1] == 0 || cached[1] >= prompt || cached[1]%16 != 0 {
		t.Errorf("cached tokens %v for a %d-token prompt: want 0, then a positive multiple of the block size below the prompt", cached, prompt)
	}
	// The prefix cache counters saw both lookups.
	st := s.Stats().Engine
	if st.PrefixQueryTokens < uint64(2*prompt-2) || st.PrefixHitTokens != uint64(cached[1]) {
		t.Errorf("prefix cache counters: queries %d hits %d", st.PrefixQueryTokens, st.PrefixHitTokens)
	}
}

// indexFeed applies a subscription's batches to an ingest.Worker.
type indexFeed struct {
	w       *ingest.Worker
	format  kvevents.Format
	mu      sync.Mutex
	batches int
	errs    []error
}

func (f *indexFeed) HandleBatch(ctx context.Context, _ uint64, payload []byte) error {
	b, err := kvevents.NewFormatDecoder(f.format, kvevents.Limits{}).Decode(payload)
	if err == nil {
		err = f.w.Apply(ctx, b)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches++
	if err != nil {
		f.errs = append(f.errs, err)
	}
	return err
}

func (f *indexFeed) Reset(ctx context.Context, _ string) error { return f.w.Reset(ctx) }

// engineHolds reports whether the engine's prefix cache holds a block of
// sequence hash h (white box: the core's block pool, under the wrapper's
// lock).
func engineHolds(s *Server, hashes []uint64) []bool {
	s.clock.mu.Lock()
	defer s.clock.mu.Unlock()
	out := make([]bool, len(hashes))
	for i, h := range hashes {
		_, out[i] = s.clock.eng.pool.byHash[h]
	}
	return out
}

// Every wire layout the simulator speaks, and vLLM v0.26's hardest shapes
// together (a hybrid model's second group, offload placeholders, salted
// requests), must let a subscriber rebuild exactly the engine's cache.
func TestKVEventsRebuildTheEnginesCache(t *testing.T) {
	for _, v := range []struct {
		enc                          string
		legacy, hybrid, place, salty bool
	}{
		{enc: "array", legacy: true}, {enc: "map"}, {enc: "mapbatch"}, {enc: "trtllm"},
		{enc: "map", hybrid: true, place: true, salty: true},
	} {
		enc := v.enc
		name := enc
		if v.hybrid {
			name = "v0.26 hybrid, offload placeholders, cache_salt"
		}
		t.Run(name, func(t *testing.T) {
			encoding, err := ParseEncoding(enc)
			if err != nil {
				t.Fatal(err)
			}
			// A small cache so that later requests evict earlier blocks
			// and BlockRemoved events flow too.
			s := startServer(t, func(c *ServerConfig) {
				c.Engine.NumGPUBlocks = 24
				c.DPRank = 2
				c.Events = EventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Encoding: encoding,
					LegacyFields: v.legacy, HybridGroups: v.hybrid, OffloadPlaceholders: v.place}
				if v.legacy {
					c.Events.ReplayLayout = kvstream.ReplayLegacy
				}
			})
			worker := kvfleet.WorkerID{Endpoint: "sim:8000", DPRank: 2}
			mem := kvindex.NewMemory(kvindex.MemoryConfig{})
			feed := &indexFeed{w: ingest.NewWorker(worker, mem, ingest.Config{BlockSize: 16})}
			if encoding == EncodingTRTLLM {
				feed.format = kvevents.FormatTRTLLM
			}
			sub, err := kvstream.NewSubscriber(kvstream.Config{Endpoint: s.EventsAddr(), ReplayEndpoint: s.ReplayAddr(),
				TailPoll: 50 * time.Millisecond, Logger: quietLog}, feed)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			subDone := make(chan struct{})
			go func() { defer close(subDone); _ = sub.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-subDone })

			type sent struct {
				tokens []uint32
				seed   uint64
			}
			var all []sent
			for i := range 12 {
				model := testModel
				if i%3 == 2 && enc != "trtllm" { // TensorRT-LLM's events carry no LoRA (trtllmExpressible)
					model = "adapter-a"
				}
				body := map[string]any{"model": model, "max_tokens": 20,
					"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("Request %d shares a prefix with request %d. %s", i%4, i%4, strings.Repeat("padding ", 30+i))}}}
				salt := ""
				if v.salty && i%2 == 1 {
					salt = fmt.Sprintf("tenant-%d", i%4)
					body["cache_salt"] = salt
				}
				status, out := post(t, s.url+"/v1/chat/completions", body)
				if status != http.StatusOK {
					t.Fatalf("request %d: %d %s", i, status, out)
				}
				lora := ""
				if model != testModel {
					lora = model
				}
				toks := promptTokens(t, true, map[string]any{"model": testModel, "messages": body["messages"]})
				// The engine caches generated tokens too: the filler cycle.
				for j := range 20 {
					id, _ := s.filler.token(j)
					toks = append(toks, id)
				}
				all = append(all, sent{tokens: toks, seed: blockhash.Seed(lora, salt)})
			}
			if s.Stats().Engine.EvictedBlocks == 0 {
				t.Fatalf("no block was evicted; the test needs a smaller cache")
			}
			// Poll until the index, fed only by the published events,
			// agrees with the engine on every request's chain.
			deadline := time.Now().Add(20 * time.Second)
			for {
				var diffs []string
				held := 0
				for i, r := range all {
					chain := blockhash.SequenceHashes(blockhash.LocalHashes(r.tokens, 16, r.seed))
					holds := engineHolds(s.Server, chain)
					want := 0
					for want < len(holds) && holds[want] {
						want++
					}
					held += want
					m, err := kvindex.MatchMap(context.Background(), mem, chain)
					if err != nil {
						t.Fatal(err)
					}
					if got := m[worker][kvfleet.TierDevice]; got != want {
						diffs = append(diffs, fmt.Sprintf("request %d: index depth %d, engine depth %d", i, got, want))
					}
				}
				if len(diffs) == 0 {
					if held == 0 {
						t.Fatal("the engine holds none of the requests' blocks: nothing was compared")
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("index never matched the engine:\n%s", strings.Join(diffs, "\n"))
				}
				time.Sleep(20 * time.Millisecond)
			}
			feed.mu.Lock()
			defer feed.mu.Unlock()
			if len(feed.errs) > 0 || feed.batches == 0 {
				t.Errorf("%d batches applied, errors %v", feed.batches, feed.errs)
			}
			st := feed.w.Stats()
			expected := map[ingest.RejectReason]bool{}
			if v.hybrid {
				expected[ingest.RejectNonMainGroup] = true
			}
			if v.place {
				expected[ingest.RejectOffloadPlaceholder] = true
			}
			for r, n := range st.Rejected {
				if (n > 0) != expected[ingest.RejectReason(r)] {
					t.Errorf("ingest rejected %d events as %s: %+v", n, ingest.RejectReason(r), st)
				}
			}
			if ss := s.Stats(); ss.EventFailures != 0 || ss.EventBatches == 0 {
				t.Errorf("publisher: %d batches, %d failures", ss.EventBatches, ss.EventFailures)
			}
		})
	}
}

func TestMetricsExposeVLLMNames(t *testing.T) {
	s := startServer(t, nil)
	if status, out := post(t, s.url+"/v1/chat/completions", chatBody("hello", map[string]any{"max_tokens": 4})); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, out)
	}
	resp, err := client.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	model := `model_name="` + testModel + `"`
	for _, series := range []string{
		"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{",
		"vllm:prefix_cache_queries_total{", "vllm:prefix_cache_hits_total{",
		"vllm:time_to_first_token_seconds_bucket{", "vllm:inter_token_latency_seconds_bucket{",
		"vllm:e2e_request_latency_seconds_bucket{",
	} {
		found := false
		for _, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(line, series) && strings.Contains(line, model) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no %s…} series with %s", series, model)
		}
	}
	for _, want := range []string{
		`vllm:cache_config_info{block_size="16"`, `num_gpu_blocks="4096"`,
		`vllm:lora_requests_info{max_lora="1"`,
		`vllm:e2e_request_latency_seconds_count{engine="0",` + model + `} 1`,
		`vllm:inter_token_latency_seconds_count{engine="0",` + model + `} 3`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestClientDisconnectAbortsTheRequest(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			// Real-time speed so that the request is still decoding when
			// the client leaves.
			s := startServer(t, func(c *ServerConfig) { c.Engine.SpeedUp = 1 })
			b, _ := json.Marshal(chatBody("Write a very long essay.", map[string]any{"max_tokens": 5000, "stream": stream}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", bytes.NewReader(b))
			respc := make(chan *http.Response, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					resp = nil
				}
				respc <- resp
			}()
			// Wait until the request is decoding in the engine.
			poll.Until(t, "the request to start decoding", 10*time.Second, func() error {
				if st := s.Stats().Engine; !(st.Running == 1 && st.UsedBlocks > 0 && st.GenerationTokens > 0) {
					return fmt.Errorf("engine %+v", st)
				}
				return nil
			})
			cancel()
			if resp := <-respc; resp != nil {
				resp.Body.Close()
			}
			poll.Until(t, "the request to be aborted after the client left", 10*time.Second, func() error {
				if st := s.Stats().Engine; !(st.Running == 0 && st.Waiting == 0 && st.UsedBlocks == 0 && st.Aborted == 1) {
					return fmt.Errorf("engine %+v", st)
				}
				return nil
			})
			if st := s.Stats().Engine; st.Finished != 0 {
				t.Errorf("the aborted request counted as finished: %+v", st)
			}
		})
	}
}

func TestPrefillDecodeHandshake(t *testing.T) {
	transfer := TransferModel{BytesPerToken: 1 << 17, Gbps: 100}
	prefill := startServer(t, func(c *ServerConfig) { c.Role = RolePrefill })
	decodeSrv := startServer(t, func(c *ServerConfig) { c.Role = RoleDecode; c.Transfer = transfer })
	long := strings.Repeat("A long prompt that is worth disaggregating. ", 12)
	orig := chatBody(long, map[string]any{"max_tokens": 12})
	prompt := len(promptTokens(t, true, orig))

	// 1. The sidecar's prefill leg.
	pre := chatBody(long, map[string]any{"max_tokens": 1, "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
			"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}})
	status, out := post(t, prefill.url+"/v1/chat/completions", pre)
	if status != http.StatusOK {
		t.Fatalf("prefill: %d %s", status, out)
	}
	pr := decode[wireResponse](t, out)
	kv := pr.KVTransferParams
	if kv == nil || kv["do_remote_prefill"] != true || kv["do_remote_decode"] != false {
		t.Fatalf("prefill kv_transfer_params %v", kv)
	}
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(prefill.url, "http://"))
	if kv["remote_engine_id"] != prefill.EngineID() || kv["remote_host"] != host || fmt.Sprint(kv["remote_port"]) != port || kv["remote_request_id"] != pr.ID {
		t.Errorf("prefill kv_transfer_params %v: want engine %s at %s:%s for %s", kv, prefill.EngineID(), host, port, pr.ID)
	}
	ids, _ := kv["remote_block_ids"].([]any)
	if wantBlocks := (prompt + 16) / 16; len(ids) == 0 || len(ids) > wantBlocks {
		t.Errorf("%d remote block ids for a %d-token prompt", len(ids), prompt)
	}
	if pr.Usage.CompletionTokens != 1 {
		t.Errorf("prefill generated %d tokens, want 1", pr.Usage.CompletionTokens)
	}
	if st := prefill.Stats().Engine; st.UsedBlocks == 0 {
		t.Errorf("prefill worker freed the blocks before the decoder read them: %+v", st)
	}

	// 2. The decode leg with the returned params.
	dec := chatBody(long, map[string]any{"max_tokens": 12, "kv_transfer_params": kv})
	status, out = post(t, decodeSrv.url+"/v1/chat/completions", dec)
	if status != http.StatusOK {
		t.Fatalf("decode: %d %s", status, out)
	}
	dr := decode[wireResponse](t, out)
	if dr.Usage.CompletionTokens != 12 || dr.Usage.PromptTokens != prompt || dr.KVTransferParams != nil {
		t.Errorf("decode response %s", out)
	}
	if st := decodeSrv.Stats().Engine; st.PromptTokens == 0 && st.GenerationTokens == 0 {
		t.Errorf("decode engine did nothing: %+v", st)
	}

	// 3. The decoder's read notification frees the prefill worker's blocks.
	poll.Until(t, "the decoder's read notification to free the prefill blocks", 10*time.Second, func() error {
		if st := prefill.Stats().Engine; st.UsedBlocks != 0 {
			return fmt.Errorf("prefill engine %+v", st)
		}
		return nil
	})

	// 4. The transferred blocks are cached on the decoder: the same
	// prompt, sent plainly, hits.
	status, out = post(t, decodeSrv.url+"/v1/chat/completions", orig)
	if status != http.StatusOK {
		t.Fatalf("decode again: %d %s", status, out)
	}
	if again := decode[wireResponse](t, out); again.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("transferred prompt not cached on the decoder: %s", out)
	}
}

func TestPrefillBlocksFreedAfterTimeout(t *testing.T) {
	prefill := startServer(t, func(c *ServerConfig) { c.Role = RolePrefill; c.KVHoldTimeout = time.Second })
	pre := chatBody(strings.Repeat("never decoded ", 40), map[string]any{"max_tokens": 1,
		"kv_transfer_params": map[string]any{"do_remote_decode": true}})
	if status, out := post(t, prefill.url+"/v1/chat/completions", pre); status != http.StatusOK {
		t.Fatalf("prefill: %d %s", status, out)
	}
	poll.Until(t, "the blocks no decoder read to be freed", 10*time.Second, func() error {
		if st := prefill.Stats().Engine; st.UsedBlocks != 0 {
			return fmt.Errorf("prefill engine %+v", st)
		}
		return nil
	})
}

type wireError struct {
	Error *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    any     `json:"code"`
	} `json:"error"`
}

func TestBadRequestsGetOpenAIErrors(t *testing.T) {
	s := startServer(t, func(c *ServerConfig) { c.Role = RolePrefill; c.MaxModelLen = 2048 })
	tokens := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = 100 + i%50
		}
		return out
	}
	cases := []struct {
		name, path string
		body       string
		status     int
		mention    string
	}{
		{"not JSON", "/v1/chat/completions", `{"model":`, 400, ""},
		{"no messages", "/v1/chat/completions", `{"model":"` + testModel + `"}`, 400, "messages"},
		{"max_tokens 0", "/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "max_tokens"},
		{"max_completion_tokens negative", "/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":-3}`, 400, "max_completion_tokens"},
		{"n 2", "/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"n":2}`, 400, "n"},
		{"wrong role params", "/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"kv_transfer_params":{"do_remote_prefill":true}}`, 400, "decode worker"},
		{"bad remote port", "/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"kv_transfer_params":{"do_remote_decode":true,"remote_port":70000}}`, 400, "remote_port"},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "nope"},
		{"unknown model completions", "/v1/completions", `{"model":"nope","prompt":"hi"}`, 404, "nope"},
		{"no prompt", "/v1/completions", `{"model":"` + testModel + `"}`, 400, "prompt"},
		{"empty prompt", "/v1/completions", `{"model":"` + testModel + `","prompt":""}`, 400, "empty"},
		{"token out of vocabulary", "/v1/completions", `{"model":"` + testModel + `","prompt":[1,2,999999999]}`, 400, "vocabulary"},
		{"prompt batch", "/v1/completions", `{"model":"` + testModel + `","prompt":["a","b"]}`, 400, "batch"},
		{"over max model len", "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":100}`, testModel, mustJSON(tokens(2000))), 400, "maximum context length"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, out := post(t, s.url+c.path, []byte(c.body))
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, out)
			}
			e := decode[wireError](t, out)
			if e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("not an OpenAI error: %s", out)
			}
			if !strings.Contains(e.Error.Message, c.mention) {
				t.Errorf("message %q does not mention %q", e.Error.Message, c.mention)
			}
		})
	}
	t.Run("unknown route", func(t *testing.T) {
		resp, err := client.Get(s.url + "/v1/nothing")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
	if st := s.Stats().Engine; st.PromptTokens != 0 || st.Running+st.Waiting != 0 {
		t.Errorf("rejected requests reached the engine: %+v", st)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestModelsAndHealth(t *testing.T) {
	s := startServer(t, nil)
	resp, err := client.Get(s.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health: %d", resp.StatusCode)
	}
	resp, err = client.Get(s.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Root        string `json:"root"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != testModel || list.Data[1].ID != "adapter-a" ||
		list.Data[1].Root != testModel || list.Data[0].MaxModelLen != 4096*16 {
		t.Errorf("/v1/models: %s", out)
	}
}

func TestOffsetEndpointPort(t *testing.T) {
	cases := []struct {
		in   string
		rank int
		want string
		bad  bool
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", false},
		{"tcp://*:5557", 3, "tcp://*:5560", false},
		{"tcp://127.0.0.1:0", 2, "tcp://127.0.0.1:0", false},
		{"tcp://[::1]:6000", 1, "tcp://[::1]:6001", false},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv_dp1", false},
		{"tcp://host", 1, "", true},
		{"tcp://host:65535", 1, "", true},
	}
	for _, c := range cases {
		got, err := offsetEndpointPort(c.in, c.rank)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("offsetEndpointPort(%q, %d) = %q, %v; want %q (error %v)", c.in, c.rank, got, err, c.want, c.bad)
		}
	}
}

func TestParseKVTransferParams(t *testing.T) {
	p, err := parseKVTransferParams([]byte(`{"do_remote_prefill":true,"remote_block_ids":[[1,2],[3]],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":7,"tp_size":1,"transfer_id":"x"}`))
	if err != nil || !p.DoRemotePrefill || p.DoRemoteDecode || fmt.Sprint(p.RemoteBlockIDs) != "[1 2 3]" ||
		p.RemoteEngineID != "e" || p.RemoteRequestID != "r" || p.RemoteHost != "h" || p.RemotePort != 7 {
		t.Errorf("grouped ids: %+v, %v", p, err)
	}
	for _, bad := range []string{
		`{"do_remote_prefill":true,"do_remote_decode":true}`,
		`{"remote_block_ids":"x"}`,
		`{"remote_port":-1}`,
		`{"do_remote_decode":"yes"}`,
		`[1]`,
	} {
		if _, err := parseKVTransferParams([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	if p, err := parseKVTransferParams([]byte(`null`)); err != nil || p.present {
		t.Errorf("null: %+v %v", p, err)
	}
}

func TestTransferDuration(t *testing.T) {
	// 1,000 tokens × 1,000 bytes × 8 bits over 8 Gbit/s = 1 ms.
	m := TransferModel{BytesPerToken: 1000, Gbps: 8}
	if d := m.Duration(1000); d != time.Millisecond {
		t.Errorf("Duration(1000) = %v, want 1ms", d)
	}
	if d := (TransferModel{}).Duration(1000); d != 0 {
		t.Errorf("no bandwidth: %v", d)
	}
}

func TestParseRoleAndEncoding(t *testing.T) {
	for _, r := range []string{"aggregated", "prefill", "decode"} {
		if got, err := ParseRole(r); err != nil || string(got) != r {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	if _, err := ParseRole("both"); err == nil {
		t.Error("ParseRole accepted both")
	}
	if _, err := ParseEncoding("json"); err == nil {
		t.Error("ParseEncoding accepted json")
	}
}

// Current vLLM names only by default; the removed and deprecated ones
// with LegacyMetricNames.
func TestMetricNamesFollowTheRelease(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		s := startServer(t, func(c *ServerConfig) { c.LegacyMetricNames = legacy })
		resp, err := http.Get(s.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for name, wantLegacy := range map[string]bool{
			"vllm:kv_cache_usage_perc": false, "vllm:inter_token_latency_seconds": false,
			"vllm:gpu_cache_usage_perc": true, "vllm:time_per_output_token_seconds": true,
		} {
			if got := strings.Contains(string(page), "# TYPE "+name+" "); got != (!wantLegacy || legacy) {
				t.Errorf("legacy=%v: %s exported %v", legacy, name, got)
			}
		}
	}
}
