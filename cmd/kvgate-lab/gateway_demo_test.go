package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/replay"
	"github.com/kvgate/kvgate/lab/testkit/poll"
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
// slice replays without failures through a round-robin fleet and the
// kvgate fleet, the side-by-side summary is printed, and all accounting is
// released.
func TestGatewayDemo(t *testing.T) {
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- gatewayDemo(ctx, &out, gatewayDemoOptions{engines: 2, listen: "127.0.0.1:0", requests: 25, compare: true,
			duration: 2 * time.Second, speedup: 50, trace: "../../lab/replay/testdata/conversation_head300.jsonl"})
	}()
	re := regexp.MustCompile(`ext_proc on (http://\S+)\.`)
	var base string
	poll.Until(t, "the gateway to announce its address", time.Minute, func() error {
		m := re.FindStringSubmatch(out.String())
		if m == nil {
			return fmt.Errorf("output so far:\n%s", out.String())
		}
		base = m[1]
		return nil
	})
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
	// `kvgate-lab replay --gateway` against the same gateway, live.
	var rout, rerr bytes.Buffer
	plotDir := t.TempDir()
	code := dispatch([]string{"replay", "--gateway", base, "--json", "--limit", "12", "--time-compression", "100", "--max-tokens", "8",
		"--trace", "../../lab/replay/testdata/conversation_head300.jsonl", "--plot", plotDir}, strings.NewReader(""), &rout, &rerr)
	if code != 0 {
		t.Fatalf("replay --gateway: exit %d: %s", code, rerr.String())
	}
	// Every chart of the live replay draws data (its hit-ratio chart once
	// had an empty series), and each file is announced.
	for _, name := range []string{"ttft_cdf.svg", "hit_ratio.svg"} {
		path := filepath.Join(plotDir, name)
		if !strings.Contains(rerr.String(), "wrote "+path+"\n") {
			t.Errorf("stderr does not say it wrote %s:\n%s", path, rerr.String())
		}
		svg, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := replay.CheckSVGSeries(svg); err != nil {
			t.Errorf("%s: %v\n%s", name, err, svg)
		}
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
	poll.Until(t, "the demo's summary", 2*time.Minute, func() error {
		if !strings.Contains(out.String(), "still open") {
			return fmt.Errorf("output so far:\n%s", out.String())
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`round-robin: 25 requests, 0 failed`),
		regexp.MustCompile(`kvgate: 25 requests, 0 failed`),
		regexp.MustCompile(`Summary: the same 25 requests, round robin vs kvgate`),
		regexp.MustCompile(`prefix-cache hit ratio \(prompt tokens\) +\d+\.\d% +\d+\.\d% +(\d+\.\d\d×|-)`),
		regexp.MustCompile(`time to first token p50 +\d+ ms +\d+ ms +\d+\.\d\d×`),
		regexp.MustCompile(`requests per engine +\d+ \d+ +\d+ \d+`),
		regexp.MustCompile(`infinite-cache ideal .*: \d+\.\d% of prompt tokens`),
		regexp.MustCompile(`\d+ requests begun, 0 still open`),
	} {
		if !want.MatchString(s) {
			t.Errorf("summary lacks %s:\n%s", want, s)
		}
	}
}

// The side-by-side table: kvgate's column over round robin's, per row.
func TestWriteSideBySide(t *testing.T) {
	reqs, _, err := loadTrace("../../lab/replay/testdata/conversation_head300.jsonl", 50)
	if err != nil {
		t.Fatal(err)
	}
	rr := &demoFleetRun{name: "round-robin", res: &replay.PolicyResult{HitRatio: 0.05, TTFTP50Ms: 400, TTFTP90Ms: 900}, perEngine: []int{25, 25}}
	kv := &demoFleetRun{name: "kvgate", res: &replay.PolicyResult{HitRatio: 0.15, TTFTP50Ms: 200, TTFTP90Ms: 450}, perEngine: []int{30, 20}, failed: 1}
	var b bytes.Buffer
	writeSideBySide(&b, reqs, rr, kv)
	s := b.String()
	for _, want := range []string{
		"Summary: the same 50 requests",
		"5.0%", "15.0%", "3.00×", // hit ratio
		"400 ms", "200 ms", "0.50×", // p50
		"900 ms", "450 ms", // p90
		"25 25", "30 20",
		fmt.Sprintf("%.1f%% of prompt tokens", 100*replay.IdealHitRatio(reqs, 64)),
	} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if !regexp.MustCompile(`failed requests +0 +1`).MatchString(s) {
		t.Errorf("failed row:\n%s", s)
	}
}

// A taken --listen address is announced, not silently replaced.
func TestListenOrFallbackSaysSo(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var b bytes.Buffer
	ln, err := listenOrFallback(&b, taken.Addr().String(), "gateway")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln.Addr().String() == taken.Addr().String() {
		t.Fatal("listened on the taken address")
	}
	if s := b.String(); !strings.Contains(s, taken.Addr().String()+" is not available") || !strings.Contains(s, ln.Addr().String()+" INSTEAD") {
		t.Fatalf("announcement: %q", s)
	}
	b.Reset()
	free, err := listenOrFallback(&b, "127.0.0.1:0", "gateway")
	if err != nil {
		t.Fatal(err)
	}
	free.Close()
	if b.Len() != 0 {
		t.Fatalf("announced a fallback for a free address: %q", b.String())
	}
}

// The embedded trace is the head of the shared conversation trace (its
// first 300 lines are the committed testdata slice) and has prefix
// sharing to show.
func TestEmbeddedTrace(t *testing.T) {
	reqs, name, err := loadTrace("", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 1000 || !strings.Contains(name, "embedded") {
		t.Fatalf("%d requests, name %q", len(reqs), name)
	}
	head, err := replay.LoadTrace("../../lab/replay/testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range head {
		if reqs[i].Timestamp != head[i].Timestamp || reqs[i].InputLength != head[i].InputLength || len(reqs[i].HashIDs) != len(head[i].HashIDs) {
			t.Fatalf("request %d differs from the testdata slice: %+v vs %+v", i, reqs[i], head[i])
		}
	}
	if r := replay.IdealHitRatio(reqs[:600], 64); r < 0.10 {
		t.Fatalf("ideal hit ratio of the first 600: %.3f", r)
	}
}

// --compare=false (what make screenshots runs): the kvgate fleet alone,
// then exit with --exit.
func TestGatewayDemoKvgateOnly(t *testing.T) {
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := gatewayDemo(ctx, &out, gatewayDemoOptions{engines: 2, listen: "127.0.0.1:0", requests: 10, exitAfter: true,
		duration: time.Second, speedup: 50, trace: "../../lab/replay/testdata/conversation_head300.jsonl"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	if strings.Contains(s, "round-robin") || !strings.Contains(s, "Summary: 10 requests, 0 failed") ||
		!regexp.MustCompile(`prefix-cache hit ratio \d+\.\d% of prompt tokens`).MatchString(s) || !strings.Contains(s, "0 still open") {
		t.Fatalf("unexpected output:\n%s", s)
	}
}
