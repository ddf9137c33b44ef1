package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// `make run` end to end, small: simulated engines behind the gateway and
// the extproc; a chat request through the gateway is answered, the trace
// slice replays without failures, and all accounting is released.
func TestGatewayDemo(t *testing.T) {
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- gatewayDemo(ctx, &out, gatewayDemoOptions{engines: 2, listen: "127.0.0.1:0", requests: 25,
			duration: 2 * time.Second, speedup: 50, trace: "../../e2e/replay/testdata/conversation_head300.jsonl"})
	}()
	re := regexp.MustCompile(`ext_proc on (http://\S+)\.`)
	var base string
	for deadline := time.Now().Add(time.Minute); base == ""; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway never announced:\n%s", out.String())
		}
	}
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"qwen3","messages":[{"role":"user","content":"Hello!"}],"max_tokens":4}`))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-kvgate-debug", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var chat struct {
		Object string `json:"object"`
		Usage  struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &chat) != nil || chat.Object != "chat.completion" || chat.Usage.PromptTokens == 0 {
		t.Fatalf("chat through the gateway: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(resp.Header.Get("x-kvgate-debug"), "chosen=") {
		t.Fatalf("no debug header: %v", resp.Header)
	}
	// `kvgate replay --gateway` against the same gateway, live.
	var rout, rerr bytes.Buffer
	code := dispatch([]string{"replay", "--gateway", base, "--json", "--limit", "12", "--time-compression", "100", "--max-tokens", "8",
		"--trace", "../../e2e/replay/testdata/conversation_head300.jsonl"}, strings.NewReader(""), &rout, &rerr)
	if code != 0 {
		t.Fatalf("replay --gateway: exit %d: %s", code, rerr.String())
	}
	var live struct {
		Requests int `json:"requests"`
		Policies map[string]struct {
			HitRatio  *float64 `json:"hit_ratio"`
			TTFTP50Ms float64  `json:"ttft_p50_ms"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(rout.Bytes(), &live); err != nil || live.Requests != 12 || len(live.Policies) != 1 || live.Policies["live"].HitRatio == nil || live.Policies["live"].TTFTP50Ms <= 0 {
		t.Fatalf("replay --gateway --json: %s (%v)", rout.String(), err)
	}
	// The demo serves until Ctrl-C after its summary; wait for the summary, then stop it.
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(out.String(), "still open"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no summary:\n%s", out.String())
		}
	}
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	if !strings.Contains(s, "25 requests, 0 failed") || !regexp.MustCompile(`\d+ requests begun, 0 still open`).MatchString(s) {
		t.Fatalf("unexpected summary:\n%s", s)
	}
}
