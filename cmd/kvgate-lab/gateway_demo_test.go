package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/logbuffer"

	"github.com/kvgate/kvgate/lab/replay"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// `make run` end to end, small: two rounds, each the trace slice through a
// fresh round-robin fleet and a fresh kvgate fleet, without failures; the
// summary over the rounds and the verdict are printed; then the last
// kvgate fleet serves: a chat request through its gateway is answered and
// names the engine that served it, `kvgate-lab replay --gateway` runs
// against it, and all accounting is released.
func TestGatewayDemo(t *testing.T) {
	var out logbuffer.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- gatewayDemo(ctx, &out, gatewayDemoOptions{engines: 2, listen: "127.0.0.1:0", requests: 25, compare: true, repeats: 2,
			duration: 2 * time.Second, speedup: 50, trace: "../../lab/replay/testdata/conversation_head300.jsonl"})
	}()
	re := regexp.MustCompile(`The kvgate-lab gateway stays up at (http://\S+);`)
	var base string
	poll.Until(t, "the demo's summary and the gateway's address", 3*time.Minute, func() error {
		select {
		case err := <-done:
			t.Fatalf("the demo ended before serving: %v\n%s", err, out.String())
		default:
		}
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
	// The served-by header names the engine kvgate chose: the debug
	// header's endpoint.
	served := resp.Header.Get(servedByHeader)
	if served == "" || !strings.Contains(resp.Header.Get("x-kvgate-debug"), served) {
		t.Fatalf("%s %q does not name the engine of x-kvgate-debug %q", servedByHeader, served, resp.Header.Get("x-kvgate-debug"))
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
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`round 1 of 2:`),
		regexp.MustCompile(`round 2 of 2:`),
		regexp.MustCompile(`(?s)round-robin: 25 requests, 0 failed.*round-robin: 25 requests, 0 failed`),
		regexp.MustCompile(`(?s)kvgate: 25 requests, 0 failed.*kvgate: 25 requests, 0 failed`),
		regexp.MustCompile(`Summary: the same 25 requests, round robin vs kvgate, 2 rounds`),
		regexp.MustCompile(`prefix-cache hit ratio \(prompt tokens\) +\d+\.\d% \[[\d.]+%–[\d.]+%\] +\d+\.\d% \[`),
		regexp.MustCompile(`time to first token p50 +\d+ ms \[\d+ ms–\d+ ms\] +\d+ ms \[\d+ ms–\d+ ms\] +\d+\.\d\d× \[`),
		regexp.MustCompile(`requests per engine \(last round\) +\d+ \d+ +\d+ \d+`),
		regexp.MustCompile(`infinite-cache ideal .*: \d+\.\d% of prompt tokens`),
		regexp.MustCompile(`\n  kvgate accounting after the replay: \d+ requests begun, 0 still open`),
		regexp.MustCompile(`\nVerdict: .*medians of 2 rounds\.\n`),
		regexp.MustCompile(`Try it \(the response's x-kvgate-served-by header`),
	} {
		if !want.MatchString(s) {
			t.Errorf("output lacks %s:\n%s", want, s)
		}
	}
}

// --exit: the summary and the verdict, and no "Try it" for a gateway that
// is about to stop.
func TestGatewayDemoExitSaysNoTryIt(t *testing.T) {
	var out logbuffer.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := gatewayDemo(ctx, &out, gatewayDemoOptions{engines: 1, listen: "127.0.0.1:0", requests: 8, compare: true, repeats: 1, exitAfter: true,
		duration: time.Second, speedup: 50, trace: "../../lab/replay/testdata/conversation_head300.jsonl"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	if !regexp.MustCompile(`\nVerdict: .*\.\n$`).MatchString(s) {
		t.Errorf("the output does not end with the verdict:\n%s", s)
	}
	for _, unwanted := range []string{"Try it", "curl", "stays up"} {
		if strings.Contains(s, unwanted) {
			t.Errorf("--exit printed %q:\n%s", unwanted, s)
		}
	}
}

// A round past its budget is a slow machine, not a defect: the demo stops
// with a slowMachineStop (exit 0) and says why.
func TestGatewayDemoRoundBudgetIsSlowMachine(t *testing.T) {
	var out logbuffer.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A one-second round cannot start two fleets and replay 8 requests
	// spread over a minute.
	err := gatewayDemo(ctx, &out, gatewayDemoOptions{engines: 1, listen: "127.0.0.1:0", requests: 8, compare: true, repeats: 2, exitAfter: true,
		duration: time.Minute, speedup: 50, roundBudget: time.Second, trace: "../../lab/replay/testdata/conversation_head300.jsonl"})
	var slow *slowMachineStop
	if !errors.As(err, &slow) || !strings.Contains(err.Error(), "round 1 of 2 did not finish within 1s") {
		t.Fatalf("want a slow-machine stop for round 1, got %v\n%s", err, out.String())
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
	var out logbuffer.Buffer
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
