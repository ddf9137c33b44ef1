package preprocess

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/enginetokenize"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// engineRegistry is a registry whose one model, "m", is in engine mode,
// with small bounds: 100 prompt tokens, a 100 ms call timeout, two calls
// in flight, two cached renders.
func engineRegistry(t *testing.T) *Registry {
	t.Helper()
	r, err := New([]kvfleet.Model{{Name: "m", BlockSize: 4, Preprocess: kvfleet.ModelPreprocess{Mode: ModeEngine}}}, Options{
		Limits: openai.Limits{MaxPromptTokens: 100},
		Engine: EngineConfig{Timeout: yamlconf.Duration(100 * time.Millisecond), MaxConcurrent: 2, CacheEntries: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fakeEngine serves /tokenize with answer; it records the last request.
type fakeEngine struct {
	*httptest.Server
	mu      sync.Mutex
	headers http.Header
	body    string
}

func newFakeEngine(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *fakeEngine {
	t.Helper()
	f := &fakeEngine{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.headers, f.body = r.Header.Clone(), string(b)
		f.mu.Unlock()
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		answer(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeEngine) endpoint() string { return strings.TrimPrefix(f.URL, "http://") }

func (f *fakeEngine) engines(string) []string { return []string{f.endpoint()} }

// httpEngines is the router's Engines in miniature (extproc/render_engines.go):
// a fixed endpoint list, and the real HTTP client the router uses.
type httpEngines struct {
	list func(string) []string
	*enginetokenize.Client
}

func (e httpEngines) RenderEngines(model string) []string { return e.list(model) }

func viaHTTP(list func(string) []string) Engines {
	return httpEngines{list: list, Client: enginetokenize.New(time.Second, DefaultEngineMaxConcurrent)}
}

func tokensJSON(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"count":%d,"max_model_len":4096,"tokens":[`, n)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i+1)
	}
	b.WriteString(`],"token_strs":null}`)
	return b.String()
}

func chatOf(text string) []byte {
	return []byte(`{"model":"m","messages":[{"role":"user","content":"` + text + `"}]}`)
}

// A well-formed answer is hashed; what kvgate sends is the TokenizeChat-
// Request it built, with none of the client's headers.
func TestEngineRenderSendsTokenizeChatRequest(t *testing.T) {
	r := engineRegistry(t)
	f := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, tokensJSON(10)) })
	res, err := r.ChatContext(WithEngines(context.Background(), viaHTTP(f.engines)), chatOf("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Approximate != "" || len(res.Tokens) != 10 || len(res.Sequence) != 2 {
		t.Fatalf("result %q: %d tokens, %d hashes; want 10 tokens in 2 full blocks", res.Approximate, len(res.Tokens), len(res.Sequence))
	}
	want := `{"model":"m","messages":[{"role":"user","content":"hello"}],"add_generation_prompt":true,"continue_final_message":false}`
	if f.body != want {
		t.Fatalf("sent %s\nwant %s", f.body, want)
	}
	for k := range f.headers {
		switch k {
		case "Content-Type", "Content-Length", "User-Agent", "Accept-Encoding":
		default:
			t.Fatalf("sent header %s: only the request's own belong on this call", k)
		}
	}
}

// Every way an engine can fail leaves the request routed on load alone,
// with the reason counted: bad shapes, a token list past
// max_prompt_tokens, statuses, a hang past the timeout, no engine.
func TestEngineRenderFallsBackByReason(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	for _, c := range []struct {
		name, reason string
		answer       func(w http.ResponseWriter, r *http.Request)
	}{
		{"tokens not a list", EngineBadResponse, func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, `{"count":1,"max_model_len":9,"tokens":"1"}`)
		}},
		{"count disagrees", EngineBadResponse, func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, `{"count":3,"max_model_len":9,"tokens":[1,2]}`)
		}},
		{"count missing", EngineBadResponse, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"tokens":[1,2]}`) }},
		{"negative id", EngineBadResponse, func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, `{"count":2,"max_model_len":9,"tokens":[1,-2]}`)
		}},
		{"id past uint32", EngineBadResponse, func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, `{"count":1,"max_model_len":9,"tokens":[4294967296]}`)
		}},
		{"not json", EngineBadResponse, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `<html>`) }},
		{"past max_prompt_tokens", EngineBadResponse, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, tokensJSON(101)) }},
		{"body past its bound", EngineBadResponse, func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, `{"count":1,"tokens":[1],"pad":"`+strings.Repeat("x", 200<<10)+`"}`)
		}},
		{"400", EngineRejected, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, `{"error":{}}`, http.StatusBadRequest) }},
		{"429", EngineOverloaded, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "busy", http.StatusTooManyRequests) }},
		{"503", EngineUnavailable, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) }},
		{"hangs", EngineTimeout, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := engineRegistry(t)
			f := newFakeEngine(t, c.answer)
			res, err := r.ChatContext(WithEngines(context.Background(), viaHTTP(f.engines)), chatOf(c.name))
			if err != nil {
				t.Fatal(err)
			}
			assertFellBack(t, r, res, c.reason)
		})
	}
	t.Run("no engine", func(t *testing.T) {
		r := engineRegistry(t)
		for _, ctx := range []context.Context{context.Background(), WithEngines(context.Background(), viaHTTP(func(string) []string { return nil }))} {
			res, err := r.CompletionContext(ctx, []byte(`{"model":"m","prompt":"hi"}`))
			if err != nil {
				t.Fatal(err)
			}
			if res.ApproximateReason != "engine_"+EngineUnavailable {
				t.Fatalf("reason %q", res.ApproximateReason)
			}
		}
		if st := r.EngineRenderStats(); st.Fallbacks[1] != 2 || st.Calls != 0 {
			t.Fatalf("stats %+v: want 2 unavailable, no call", st)
		}
	})
}

func assertFellBack(t *testing.T, r *Registry, res *Result, reason string) {
	t.Helper()
	if res.ApproximateReason != "engine_"+reason || res.Approximate == "" || len(res.Tokens) != 0 || res.Sequence != nil {
		t.Fatalf("reason %q (%q), %d tokens, %d hashes; want engine_%s, none", res.ApproximateReason, res.Approximate, len(res.Tokens), len(res.Sequence), reason)
	}
	st := r.EngineRenderStats()
	for i, name := range EngineReasons {
		want := uint64(0)
		if name == reason {
			want = 1
		}
		if st.Fallbacks[i] != want {
			t.Fatalf("fallbacks[%s] = %d, want %d (%+v)", name, st.Fallbacks[i], want, st)
		}
	}
	if st.CacheEntries != 0 {
		t.Fatalf("a failed render was cached: %+v", st)
	}
}

// A client that goes away during the call is not routed: nobody is left
// to answer.
func TestEngineRenderCancelled(t *testing.T) {
	r := engineRegistry(t)
	ctx, cancel := context.WithCancel(context.Background())
	f := newFakeEngine(t, func(w http.ResponseWriter, req *http.Request) {
		cancel()
		<-req.Context().Done()
	})
	_, err := r.ChatContext(WithEngines(ctx, viaHTTP(f.engines)), chatOf("bye"))
	if !errors.Is(err, ErrCancelled) {
		t.Fatalf("err %v, want ErrCancelled", err)
	}
}

// max_concurrent bounds the calls in flight: with two held by the engine
// a third request does not wait, it is routed on load alone (overloaded);
// the two finish normally when the engine answers.
func TestEngineRenderConcurrencyBound(t *testing.T) {
	r, err := New([]kvfleet.Model{{Name: "m", BlockSize: 4, Preprocess: kvfleet.ModelPreprocess{Mode: ModeEngine}}}, Options{
		Engine: EngineConfig{Timeout: yamlconf.Duration(time.Minute), MaxConcurrent: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	arrived, release := make(chan struct{}, 2), make(chan struct{})
	f := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, tokensJSON(8))
	})
	ctx := WithEngines(context.Background(), viaHTTP(f.engines))
	type out struct {
		res *Result
		err error
	}
	results := make(chan out, 2)
	for i := range 2 {
		go func() {
			res, err := r.ChatContext(ctx, chatOf(fmt.Sprint("held ", i)))
			results <- out{res, err}
		}()
	}
	<-arrived
	<-arrived
	res, err := r.ChatContext(ctx, chatOf("third"))
	if err != nil || res.ApproximateReason != "engine_"+EngineOverloaded {
		t.Fatalf("third request: %v, reason %q; want overloaded", err, res.ApproximateReason)
	}
	close(release)
	for range 2 {
		o := <-results
		if o.err != nil || o.res.Approximate != "" || len(o.res.Sequence) != 2 {
			t.Fatalf("held request: %v %+v", o.err, o.res)
		}
	}
	if st := r.EngineRenderStats(); st.Calls != 2 || st.Fallbacks[2] != 1 {
		t.Fatalf("stats %+v: want 2 calls and 1 overloaded", st)
	}
}

// The render cache holds at most cache_entries renders and cacheMaxTokens
// ids, evicting the least recently used.
func TestRenderCacheBounds(t *testing.T) {
	r := engineRegistry(t) // cache_entries 2
	f := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, tokensJSON(8)) })
	ctx := WithEngines(context.Background(), viaHTTP(f.engines))
	for _, text := range []string{"a", "b", "c", "c", "b"} {
		if _, err := r.ChatContext(ctx, chatOf(text)); err != nil {
			t.Fatal(err)
		}
	}
	// a, b, c called; c and b (the last two) answered from the cache.
	if st := r.EngineRenderStats(); st.Calls != 3 || st.CacheHits != 2 || st.CacheEntries != 2 || st.CacheTokens != 16 {
		t.Fatalf("stats %+v: want 3 calls, 2 hits, 2 entries of 8 ids", st)
	}
	if _, err := r.ChatContext(ctx, chatOf("a")); err != nil {
		t.Fatal(err)
	}
	if st := r.EngineRenderStats(); st.Calls != 4 {
		t.Fatalf("stats %+v: a was evicted, want it called again", st)
	}

	c := newRenderCache(100, 10)
	key := func(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }
	c.put(key("x"), make([]uint32, 6))
	c.put(key("y"), make([]uint32, 6)) // 12 ids > 10: x goes
	c.put(key("z"), make([]uint32, 11))
	if n, toks := c.size(); n != 1 || toks != 6 {
		t.Fatalf("size %d entries, %d ids; want y alone (x evicted, z too large to keep)", n, toks)
	}
	if _, ok := c.get(key("x"), nil); ok {
		t.Fatal("x kept past the token bound")
	}
	if got, ok := c.get(key("y"), nil); !ok || len(got) != 6 {
		t.Fatal("y lost")
	}
}

// A Responses request with tools (handed to the template in the Responses
// API's own shape) and a chat with RAG documents are not sent: /tokenize
// takes neither as the engine's own route would.
func TestEngineRenderUnsupportedInputs(t *testing.T) {
	r := engineRegistry(t)
	f := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, tokensJSON(8)) })
	ctx := WithEngines(context.Background(), viaHTTP(f.engines))
	res, err := r.ChatContext(ctx, []byte(`{"model":"m","messages":[{"role":"user","content":"q"}],"documents":[{"title":"t","text":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	assertFellBack(t, r, res, EngineUnsupported)
	res, err = r.ResponsesContext(ctx, []byte(`{"model":"m","input":"q","tools":[{"type":"function","name":"f","parameters":{}}]}`))
	if err != nil || res.ApproximateReason != "engine_"+EngineUnsupported {
		t.Fatalf("responses with tools: %v, reason %q", err, res.ApproximateReason)
	}
	if st := r.EngineRenderStats(); st.Calls != 0 {
		t.Fatalf("stats %+v: nothing should have been sent", st)
	}
}
