//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// expensivePrompt is a chat body whose prompt is cheap to send and costly
// to tokenize, yet within every bound but time: 30 runs of 200 KiB of "a"
// (each one pre-token under max_word_bytes, ~0.45 µs/byte of BPE here,
// ~2.7 s in all; 8 bytes a token, so ~790K tokens, under
// max_prompt_tokens).
func expensivePrompt(t *testing.T) []byte {
	run := strings.Repeat("a", 200<<10)
	parts := make([]string, 30)
	for i := range parts {
		parts[i] = run
	}
	return chatJSON(t, map[string]any{"messages": []map[string]string{{"role": "user", "content": strings.Join(parts, " ")}}})
}

// cpuSeconds is the process's user+system CPU time (/proc/<pid>/stat
// fields 14 and 15, in USER_HZ = 100 ticks a second on Linux).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err) // not Linux: nothing to measure with
	}
	// The command name (field 2) is parenthesised and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// Issue 15 item 5: a request costing seconds of CPU stops at
// extproc.preprocess.timeout with 503, and ordinary requests are answered
// meanwhile.
func TestExtprocPreprocessDeadline(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 1, extproc: map[string]any{
		"debug_header": map[string]any{},
		// Far below the ~2.7 s the prompt costs, far above an ordinary
		// request's preprocessing (well under a millisecond).
		"preprocess": map[string]any{"timeout": "250ms"},
	}})
	s := f.steadyTraffic()
	start := time.Now()
	status, _, body, err := f.rawPost(context.Background(), "/v1/chat/completions", expensivePrompt(t), nil)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	e := wantRefusal(t, "expensive prompt", status, body, http.StatusServiceUnavailable, "", "extproc.preprocess.timeout")
	if e.Error.Code == nil || *e.Error.Code != "preprocess_timeout" {
		t.Fatalf("code %v, want preprocess_timeout", e.Error.Code)
	}
	s.end(t, 1)
	t.Logf("refused after %v with a 250ms preprocess timeout", took.Round(time.Millisecond))
}

// Issue 15 item 5: work continued after the client cancelled. With a
// deadline too long to matter, the extproc's CPU time stops growing once
// the client goes away mid-tokenization.
func TestExtprocStopsWorkWhenTheClientCancels(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 1, extproc: map[string]any{
		"debug_header": map[string]any{},
		"preprocess":   map[string]any{"timeout": "60s"},
	}})
	pid := f.extproc.Pid()
	body := expensivePrompt(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, _, err := f.rawPost(ctx, "/v1/chat/completions", body, nil)
		done <- err
	}()
	// Let the extproc get into the prompt (the body is in after a few ms
	// on loopback): CPU time must be rising before the cancel.
	before := cpuSeconds(t, pid)
	time.Sleep(600 * time.Millisecond)
	atCancel := cpuSeconds(t, pid)
	if atCancel-before < 0.1 {
		t.Fatalf("the extproc used %.2fs of CPU in the 600ms before the cancel: the prompt is not being worked on", atCancel-before)
	}
	cancel()
	<-done
	time.Sleep(time.Second)
	oneLater := cpuSeconds(t, pid)
	time.Sleep(time.Second)
	twoLater := cpuSeconds(t, pid)
	t.Logf("extproc CPU: %.2fs in the 600ms before the cancel, %.2fs in the second after it, %.2fs in the second after that",
		atCancel-before, oneLater-atCancel, twoLater-oneLater)
	// Uncancelled, the prompt would burn ~2 s more of CPU; idle, the
	// process spends a few ms a second (probes, engine metrics).
	if twoLater-oneLater > 0.25 {
		t.Fatalf("the extproc kept working after the cancel: %.2fs of CPU between 1 s and 2 s after it", twoLater-oneLater)
	}
	if oneLater-atCancel > 1.0 {
		t.Fatalf("%.2fs of CPU in the second after the cancel: it did not stop within 1 s", oneLater-atCancel)
	}
	// The service is unharmed.
	f.steadyTraffic().end(t, 1)
}
