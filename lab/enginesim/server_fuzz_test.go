package enginesim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// FuzzGenerateRequest sends arbitrary bodies to both generation endpoints:
// every answer must be a 2xx with a JSON or event-stream body, or an
// OpenAI JSON error with a 4xx status — never a panic or a hang.
func FuzzGenerateRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`,
		`{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":2}`,
		`{"model":"` + testModel + `","prompt":[1,2,3],"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`,
		`{"model":"` + testModel + `","prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[[1],[2]],"remote_port":1}}`,
		`{"model":"adapter-a","prompt":["a"],"n":1,"max_tokens":3}`,
		`{"model":"` + testModel + `","prompt":"x","max_tokens":1e3}`,
		`{}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		f.Fatal(err)
	}
	cfg := ServerConfig{
		Model: testModel, LoRAs: []string{"adapter-a"}, TokenizerDir: dir,
		Engine:      Config{BlockSize: 16, NumGPUBlocks: 64, SpeedUp: 1000},
		MaxModelLen: 256, Role: RolePrefill, Logger: quietLog, KVHoldTimeout: time.Millisecond,
	}
	s, err := NewServer(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if ctx.Err() != nil {
			t.Fatalf("no answer within 10s for %q", body)
		}
		out := rec.Body.Bytes()
		switch {
		case rec.Code == http.StatusOK && bytes.HasPrefix(out, []byte("data: ")):
			if !bytes.HasSuffix(out, []byte("data: [DONE]\n\n")) {
				t.Fatalf("stream without [DONE]: %q", out)
			}
		case rec.Code == http.StatusOK:
			if !json.Valid(out) {
				t.Fatalf("200 with invalid JSON %q", out)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var e struct {
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(out, &e) != nil || e.Error == nil || e.Error.Message == "" {
				t.Fatalf("status %d with a body that is not an OpenAI error: %q", rec.Code, out)
			}
		default:
			t.Fatalf("status %d for %q: %q", rec.Code, body, out)
		}
	})
}
