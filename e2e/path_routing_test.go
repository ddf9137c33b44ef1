package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// startModelEngine is startEngine for a named model and tokenizer.
func startModelEngine(t *testing.T, name, model, tokDir string, seed int) *engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		http, err1 := freeport.Addr()
		ev, err2 := freeport.Addr()
		rep, err3 := freeport.Addr()
		if err := firstErr(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		e := &engine{endpoint: http, events: "tcp://" + ev, replay: "tcp://" + rep}
		e.proc = procs.Start(t, name, labBin, "enginesim",
			"--listen", http, "--model", model, "--tokenizer", tokDir,
			"--block-size", strconv.Itoa(blockSize), "--gpu-blocks", "8192", "--speedup", speedup,
			"--kv-events-endpoint", e.events, "--kv-events-replay", e.replay,
			"--seed", strconv.Itoa(seed), "--drain", "2s")
		err := e.proc.WaitHTTP(ctx, "http://"+http+"/health")
		if err == nil {
			return e
		}
		if attempt == startAttempts || ctx.Err() != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// Issue 31 finding 1, reproduced as filed: a qwen3 pool and a llama pool
// behind real `kvgate extproc` and enginesim processes; 20 llama chat
// requests to /v1/chat/%63ompletions. Before: 13 of 20 landed on qwen3
// engines (404 model_not_found) and no decision was recorded. Now 20 of 20
// are served by llama engines, each a recorded decision — through a
// gateway playing envoy.yaml (whose HTTP connection manager now normalises
// the path) and through one with Envoy's defaults (no normalisation:
// kvgate reads the path as the engines do). The normalising gateway also
// sends other spellings to chat and redirects an escaped slash.
func TestEncodedPathsStayInTheirModelsPool(t *testing.T) {
	qwenDir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	llamaDir, err := modelfiles.Model("llama3_1")
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	pools := map[string]string{"qwen3": qwenDir, "llama": llamaDir}
	var engines []map[string]any
	llamaAt := map[string]bool{}
	var workers []string
	seed := 1
	for _, model := range []string{"qwen3", "llama"} {
		for i := range 2 {
			e := startModelEngine(t, fmt.Sprintf("%s%d", model, i), model, pools[model], seed)
			seed++
			engines = append(engines, map[string]any{"endpoint": e.endpoint, "model": model, "events": e.events, "replay": e.replay})
			workers = append(workers, e.endpoint)
			llamaAt[e.endpoint] = model == "llama"
		}
	}
	extproc := map[string]any{
		"health_check": map[string]any{"interval": "200ms", "timeout": "1s", "unhealthy_after": 2},
		"debug_header": map[string]any{"allow_any_client": true},
	}
	cfg := map[string]any{
		"models": []map[string]any{
			{"name": "qwen3", "block_size": blockSize, "tokenizer": qwenDir},
			{"name": "llama", "block_size": blockSize, "tokenizer": llamaDir},
		},
		"engines": engines,
		"extproc": extproc,
	}
	path := filepath.Join(t.TempDir(), "kvgate.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var listen, admin string
	for attempt := 1; ; attempt++ {
		l, err1 := freeport.Addr()
		a, err2 := freeport.Addr()
		if err := firstErr(err1, err2); err != nil {
			t.Fatal(err)
		}
		extproc["listen"], extproc["admin"] = l, a
		writeConfig(t, path, cfg)
		p := procs.Start(t, "extproc", kvgateBin, "extproc", "--config", path, "--drain", "2s")
		err := p.WaitHTTP(ctx, "http://"+a+"/readyz")
		if err == nil {
			listen, admin = l, a
			break
		}
		if attempt == startAttempts || ctx.Err() != nil {
			t.Fatalf("extproc: %v", err)
		}
	}
	opts := envoyharness.ProxyOptions{ExtProc: []string{listen}, Workers: workers}
	shipped := envoyharness.MustShipped("envoy.yaml").AllowingClientDebug()
	if shipped.Path == (envoyharness.PathNormalization{}) {
		t.Fatal("envoy.yaml sets no path normalisation")
	}
	plain := shipped
	plain.Path = envoyharness.PathNormalization{}
	_, normalising := envoyGatewayFor(t, shipped, opts)
	_, unnormalised := envoyGatewayFor(t, plain, opts)

	noRedirect := &http.Client{Timeout: httpClient.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(gateway, path string, i int) (int, http.Header, []byte) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "llama", "max_tokens": 2,
			"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Request %d: which pool answers?", i)}}})
		req, err := http.NewRequest(http.MethodPost, gateway+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("content-type", "application/json")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, resp.Header, b
	}
	decisions := func() []struct {
		Model, Chosen string
		Tokens        int
	} {
		t.Helper()
		resp, err := httpClient.Get("http://" + admin + "/debug/decisions")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []struct {
			Model, Chosen string
			Tokens        int
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	for _, gw := range []struct{ name, url string }{{"envoy.yaml", normalising}, {"no normalisation", unnormalised}} {
		before := len(decisions())
		onLlama := 0
		for i := range 20 {
			status, _, body := send(gw.url, "/v1/chat/%63ompletions", i)
			var r struct{ Model string }
			if status == http.StatusOK && json.Unmarshal(body, &r) == nil && r.Model == "llama" {
				onLlama++
			} else {
				t.Logf("%s request %d: %d %.200s", gw.name, i, status, body)
			}
		}
		ds := decisions()
		recorded := 0
		for _, d := range ds[min(before, len(ds)):] {
			if d.Model == "llama" && d.Tokens > 0 && llamaAt[endpointOf(d.Chosen)] {
				recorded++
			}
		}
		t.Logf("%s: %d of 20 served by llama engines, %d llama decisions recorded", gw.name, onLlama, recorded)
		if onLlama != 20 || recorded != 20 {
			t.Fatalf("%s: %d of 20 served by llama engines, %d decisions recorded; want 20 and 20", gw.name, onLlama, recorded)
		}
	}

	// Spellings only a normalising gateway serves as chat, and an escaped
	// slash it redirects (Location: the plain path) rather than forwards.
	for i, p := range []string{"//v1/chat/./completions", "/v1//chat/x/../completions"} {
		if status, _, body := send(normalising, p, 100+i); status != http.StatusOK {
			t.Fatalf("%s through envoy.yaml: %d %.200s", p, status, body)
		}
	}
	status, hdr, _ := send(normalising, "/v1/chat%2Fcompletions", 200)
	if status != http.StatusTemporaryRedirect || hdr.Get("location") != "/v1/chat/completions" {
		t.Fatalf("escaped slash through envoy.yaml: %d location %q, want 307 to /v1/chat/completions", status, hdr.Get("location"))
	}
	// A route kvgate does not parse, naming llama, stays in llama's pool
	// whatever the gateway: the engines answer it (404 here: enginesim
	// serves no embeddings), never a qwen3 engine's model_not_found.
	for i := range 10 {
		status, _, body := send(unnormalised, "/v1/embeddings", 300+i)
		if bytes.Contains(body, []byte("model_not_found")) {
			t.Fatalf("/v1/embeddings naming llama reached a qwen3 engine: %d %s", status, body)
		}
	}
}

// endpointOf is a worker id's endpoint ("ip:port#rank" → "ip:port").
func endpointOf(id string) string {
	if i := bytes.IndexByte([]byte(id), '#'); i >= 0 {
		return id[:i]
	}
	return id
}
