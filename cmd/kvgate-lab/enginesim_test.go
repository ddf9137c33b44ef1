package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

func TestEnginesimRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--role", "both"},
		{"--kv-events-encoding", "json"},
		{"--block-size", "0"},
		{"--speedup", "-1"},
		{"--dp-rank", "-1"},
		{"--kv-events-replay", "tcp://127.0.0.1:0"},
		{"--tokenizer", "/nonexistent"},
		{"--drain", "0s"},
		{"stray"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runEnginesim(args, nil, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("%q: no message", args)
		}
	}
}

func TestEnginesimServesUntilCancelled(t *testing.T) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := enginesimConfig(enginesimFlags{
		model: "sim-model", tokDir: dir, blockSize: 16, gpuBlocks: 512, maxSeqs: 8, maxBatched: 512,
		speedup: 100, role: "aggregated", evEndpoint: "tcp://127.0.0.1:0", evEncoding: "map",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveEnginesim(ctx, cfg, "127.0.0.1:0", 5*time.Second, func(a net.Addr, s *enginesim.Server) {
			if !strings.HasPrefix(s.EventsAddr(), "tcp://127.0.0.1:") {
				t.Errorf("events address %q", s.EventsAddr())
			}
			addrc <- a
		})
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	}
	body := `{"model":"sim-model","prompt":"hello there","max_tokens":3}`
	resp, err := http.Post("http://"+addr.String()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &r) != nil || r.Usage.CompletionTokens != 3 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("graceful stop: %v", err)
	}
}
