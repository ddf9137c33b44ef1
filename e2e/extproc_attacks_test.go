package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/procs"
)

// Issue 15's attacks on `kvgate extproc` (items 3, 5 and 6, and issue 17's
// empty body and missing model), each against the real process over
// loopback through the gateway that plays Envoy, with the shipped defaults:
// each attack is refused, and ordinary requests sent meanwhile are
// answered. The CPU attacks that need seconds of burn (deadline, cancel)
// are in extproc_attacks_full_test.go (make e2e).

// steady sends ordinary requests one after another until stopped,
// counting answers; a failure is recorded with its reason.
type steady struct {
	ok     atomic.Int64
	mu     sync.Mutex
	failed []string
	stop   chan struct{}
	done   chan struct{}
}

func (f *fleet) steadyTraffic() *steady {
	s := &steady{stop: make(chan struct{}), done: make(chan struct{})}
	rng := rand.New(rand.NewPCG(15, 15))
	go func() {
		defer close(s.done)
		for {
			if _, err := f.complete(randomTokens(rng, 24), 2, false); err != nil {
				s.mu.Lock()
				s.failed = append(s.failed, err.Error())
				s.mu.Unlock()
			} else {
				s.ok.Add(1)
			}
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}()
	return s
}

// end stops the traffic and fails the test if an ordinary request was
// not answered, or if fewer than minOK were answered since it started
// (the one in flight at the stop is waited for, so one is always sent
// while the attack runs).
func (s *steady) end(t *testing.T, minOK int64) {
	t.Helper()
	close(s.stop)
	<-s.done
	if len(s.failed) > 0 {
		t.Fatalf("%d ordinary requests failed during the attack, first: %s", len(s.failed), s.failed[0])
	}
	if n := s.ok.Load(); n < minOK {
		t.Fatalf("only %d ordinary requests answered during the attack, want >= %d", n, minOK)
	}
}

// rawPost sends body as is and returns the status, headers and body.
func (f *fleet) rawPost(ctx context.Context, path string, body []byte, header map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.gateway+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("content-type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, b, err
}

// openAIError decodes an OpenAI-style error body.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func wantRefusal(t *testing.T, what string, status int, body []byte, wantStatus int, param, contains string) openAIError {
	t.Helper()
	var e openAIError
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%s: status %d, body %.300q is not OpenAI error JSON: %v", what, status, body, err)
	}
	gotParam := ""
	if e.Error.Param != nil {
		gotParam = *e.Error.Param
	}
	if status != wantStatus || gotParam != param || !strings.Contains(e.Error.Message, contains) {
		t.Fatalf("%s: got %d param %q %q, want %d param %q containing %q", what, status, gotParam, e.Error.Message, wantStatus, param, contains)
	}
	return e
}

func chatJSON(t *testing.T, fields map[string]any) []byte {
	t.Helper()
	req := map[string]any{"model": modelName, "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": "What is a KV cache?"}}}
	for k, v := range fields {
		if v == nil {
			delete(req, k)
		} else {
			req[k] = v
		}
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExtprocRefusesAttacks(t *testing.T) {
	// The shipped defaults for what these attacks target (the other e2e
	// fleets turn the debug header on to read decisions).
	f := startFleet(t, fleetOptions{engines: 1, extproc: map[string]any{"debug_header": map[string]any{}}})
	ctx := context.Background()

	t.Run("DebugHeaderFromAnyClient", func(t *testing.T) {
		// Issue 15 item 3: x-kvgate-debug: 1 returned every worker's
		// ip:port, cost and cached depth to any client.
		s := f.steadyTraffic()
		for range 3 {
			status, hdr, body, err := f.rawPost(ctx, "/v1/chat/completions", chatJSON(t, nil), map[string]string{"x-kvgate-debug": "1"})
			if err != nil || status != http.StatusOK {
				t.Fatalf("request asking for debug: %d %v %.200s", status, err, body)
			}
			if v := hdr.Get("x-kvgate-debug"); v != "" {
				t.Fatalf("a client without a grant got x-kvgate-debug: %q", v)
			}
		}
		s.end(t, 1)
		m, err := scrape("http://" + f.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if m["kvgate_extproc_debug_header_requests_total"] < 3 {
			t.Fatalf("refused debug requests not counted: %v", m["kvgate_extproc_debug_header_requests_total"])
		}
	})

	t.Run("EightMiBOneCharacterPrompt", func(t *testing.T) {
		// Issue 15 item 5: tokenizing 8 MiB of one character took ~10 s
		// and was only then refused.
		for _, c := range []string{"a", " "} {
			body := chatJSON(t, map[string]any{"messages": []map[string]string{{"role": "user", "content": strings.Repeat(c, 8<<20-200)}}})
			s := f.steadyTraffic()
			start := time.Now()
			status, _, resp, err := f.rawPost(ctx, "/v1/chat/completions", body, nil)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, fmt.Sprintf("8 MiB of %q", c), status, resp, http.StatusRequestEntityTooLarge, "messages", "extproc.preprocess.max_word_bytes")
			s.end(t, 1)
			t.Logf("8 MiB of %q refused in %v (client → gateway → extproc → 413)", c, took.Round(time.Millisecond))
		}
	})

	t.Run("MaxTokensInt64Max", func(t *testing.T) {
		// Issue 15 item 6: answered 503 with picker internals.
		s := f.steadyTraffic()
		status, _, resp, err := f.rawPost(ctx, "/v1/chat/completions", chatJSON(t, map[string]any{"max_tokens": json.Number("9223372036854775807")}), nil)
		if err != nil {
			t.Fatal(err)
		}
		e := wantRefusal(t, "max_tokens 2^63-1", status, resp, http.StatusBadRequest, "max_tokens", "is more than the 67108864 tokens")
		if strings.Contains(e.Error.Message, "picker") || strings.Contains(e.Error.Message, "request:") {
			t.Fatalf("the refusal names internals: %q", e.Error.Message)
		}
		s.end(t, 1)
	})

	t.Run("RequestChatTemplate", func(t *testing.T) {
		// Issue 15 item 6: routed on load instead of refused as vLLM does.
		s := f.steadyTraffic()
		for field, extra := range map[string]map[string]any{
			"chat_template":                      {"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"},
			"chat_template_kwargs.chat_template": {"chat_template_kwargs": map[string]any{"chat_template": "x"}},
		} {
			status, _, resp, err := f.rawPost(ctx, "/v1/chat/completions", chatJSON(t, extra), nil)
			if err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, field, status, resp, http.StatusBadRequest, field, "--trust-request-chat-template")
		}
		s.end(t, 1)
	})

	t.Run("EmptyBodyAndMissingModel", func(t *testing.T) {
		// Issue 17 item 8: an empty POST was routed (model ""), a request
		// without model got 404 "The model `` does not exist".
		s := f.steadyTraffic()
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			status, _, resp, err := f.rawPost(ctx, path, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, "empty POST "+path, status, resp, http.StatusBadRequest, "", "request body is empty")
		}
		status, _, resp, err := f.rawPost(ctx, "/v1/chat/completions", chatJSON(t, map[string]any{"model": nil}), nil)
		if err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, "no model", status, resp, http.StatusBadRequest, "model", "model: required")
		s.end(t, 1)
	})

	// And after all of it, the service still serves.
	if _, err := f.complete(randomTokens(rand.New(rand.NewPCG(1, 2)), 24), 2, false); err != nil {
		t.Fatalf("after the attacks: %v", err)
	}
}

// Issue 15 item 6: ext_proc on 0.0.0.0 without TLS was accepted silently.
// The process refuses to start, naming the key and the opt-in.
func TestExtprocPlaintextOnAllInterfacesRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvgate.yaml")
	if err := os.WriteFile(path, []byte("extproc:\n  listen: 0.0.0.0:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := procs.Start(t, "extproc", kvgateBin, "extproc", "--config", path)
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("extproc listening on 0.0.0.0 without TLS kept running")
	}
	if out := p.Output(); !strings.Contains(out, `extproc.listen: "0.0.0.0:0" is not a loopback address`) || !strings.Contains(out, "extproc.allow_plaintext: true") {
		t.Fatalf("output %q: want the refusal naming extproc.listen and extproc.allow_plaintext", out)
	}
}
