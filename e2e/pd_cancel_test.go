package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// Cancellation of a disaggregated request (issue 9 item 4; Dynamo #13691:
// a client disconnect left the prefill running). One prefill and one
// decode simulator, kvgate's real request path (router, ext_proc server,
// load view) behind the harness gateway, which plays Envoy and llm-d's P/D
// sidecar. The client leaves during the prefill, during the decoder's KV
// pull, and mid-stream; each time the prefill worker's blocks must be
// free within seconds — its KV hold timeout is 10 minutes, so only the
// cancellation can have freed them — and kvgate's accounting for both legs
// must be back to nothing.

type pdRig struct {
	prefill, decode *enginesim.Server
	router          *extproc.Router
	gateway         string
	baseline        int64 // tickets opened by the rig itself
}

const pdHoldTimeout = 10 * time.Minute

func startSim(t *testing.T, tokDir string, role enginesim.Role, speedUp, gbps float64) (*enginesim.Server, string) {
	t.Helper()
	s, err := enginesim.NewServer(enginesim.ServerConfig{
		Model: modelName, TokenizerDir: tokDir, Role: role,
		Engine:        enginesim.Config{BlockSize: blockSize, NumGPUBlocks: 8192, SpeedUp: speedUp},
		Transfer:      enginesim.TransferModel{BytesPerToken: 131072, Gbps: gbps},
		KVHoldTimeout: pdHoldTimeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, ln.Addr().String()
}

func startPDRig(t *testing.T, prefillSpeed, decodeSpeed, gbps float64) *pdRig {
	t.Helper()
	tokDir, err := modelfiles.Model(modelName)
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	rig := &pdRig{}
	var pAt, dAt string
	rig.prefill, pAt = startSim(t, tokDir, enginesim.RolePrefill, prefillSpeed, gbps)
	rig.decode, dAt = startSim(t, tokDir, enginesim.RoleDecode, decodeSpeed, gbps)
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: modelName, BlockSize: blockSize, Tokenizer: tokDir}}
	cfg.Engines = []config.Engine{
		{Endpoint: pAt, Model: modelName, DPRanks: 1, Role: "prefill"},
		{Endpoint: dAt, Model: modelName, DPRanks: 1, Role: "decode"},
	}
	cfg.Extproc.PD.Enabled = true
	cfg.Extproc.PD.MinUncachedTokens = 256
	cfg.Extproc.HealthCheck.Disabled = true
	cfg.Extproc.EngineMetrics.Disabled = true
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg, err := preprocess.New(cfg.Models, preprocess.Options{Limits: openai.Limits{MaxBodyBytes: cfg.Extproc.MaxBodyBytes}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fleet, err := cfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	rig.router, err = extproc.NewRouter(extproc.RouterConfig{Extproc: cfg.Extproc, Workers: fleet}, reg, kvindex.NewMemory(kvindex.MemoryConfig{}), log)
	if err != nil {
		t.Fatal(err)
	}
	// Queued prefill work on the decode worker makes splitting pay, so
	// every long prompt is disaggregated.
	rig.router.Load().Begin(kvfleet.WorkerID{Endpoint: dAt}, 1<<20, 0, time.Now())
	rig.baseline = 1
	srv, err := server.New(rig.router, server.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServing()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	srv.SetServing()
	var workers []string
	for _, e := range cfg.Engines {
		workers = append(workers, e.Endpoint)
	}
	_, rig.gateway = debugGateway(t, "envoy.yaml", envoyharness.ProxyOptions{ExtProc: []string{ln.Addr().String()}, Workers: workers, Logger: log})
	return rig
}

// send starts a long streamed chat request; the returned cancel is the
// client hanging up.
func (r *pdRig) send(t *testing.T, maxTokens int) (<-chan *http.Response, context.CancelFunc) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": modelName, "stream": true, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": strings.Repeat("Explain every clause of the long contract below in detail. ", 250)}}})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", r.gateway+"/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	out := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- nil
			return
		}
		out <- resp
	}()
	return out, cancel
}

// checkReleased: the prefill worker's blocks and kvgate's accounting
// (both legs) are released within seconds of the cancel, far inside the
// hold timeout.
func (r *pdRig) checkReleased(t *testing.T, canceledAt time.Time, wantCanceled uint64) {
	t.Helper()
	poll.True(t, "prefill worker's blocks freed after the cancel", 10*time.Second, func() bool {
		return r.prefill.Stats().Engine.UsedBlocks == 0
	})
	poll.True(t, "decode worker's blocks freed after the cancel", 10*time.Second, func() bool {
		st := r.decode.Stats()
		return st.Engine.UsedBlocks == 0 && st.Transferring == 0 && st.Engine.Running == 0 && st.Engine.Waiting == 0
	})
	poll.True(t, "kvgate's tickets closed after the cancel", 10*time.Second, func() bool {
		return r.router.Load().Stats().Open == r.baseline
	})
	t.Logf("prefill blocks and kvgate's load released %v after the cancel (hold timeout %v)", time.Since(canceledAt).Round(time.Millisecond), pdHoldTimeout)
	st := r.router.Load().Stats()
	if st.Begun != uint64(r.baseline)+2 {
		t.Fatalf("%d tickets begun, want the rig's %d + 2 (decode and prefill legs): not disaggregated?", st.Begun, r.baseline)
	}
	if st.Finished[1] != wantCanceled { // loadview.OutcomeCanceled
		t.Fatalf("finished outcomes %v: want %d legs closed as canceled", st.Finished, wantCanceled)
	}
}

func TestPDCancelDuringPrefill(t *testing.T) {
	// A slow prefill (about a second for the prompt).
	r := startPDRig(t, 0.05, 10, 100)
	_, cancel := r.send(t, 8)
	poll.True(t, "prefill running", 20*time.Second, func() bool { return r.prefill.Stats().Engine.UsedBlocks > 0 })
	at := time.Now()
	cancel()
	r.checkReleased(t, at, 2)
	if st := r.prefill.Stats().Engine; st.Aborted != 1 {
		t.Fatalf("prefill engine aborted %d requests, want 1: %+v", st.Aborted, st)
	}
	if st := r.decode.Stats().Engine; st.PromptTokens != 0 {
		t.Fatalf("decode leg ran after the client left during prefill: %+v", st)
	}
}

func TestPDCancelDuringKVTransfer(t *testing.T) {
	// A fast prefill, then a KV pull at 0.001 Gbit/s: the decoder waits
	// for it for an hour.
	r := startPDRig(t, 10, 10, 0.001)
	_, cancel := r.send(t, 8)
	poll.True(t, "decoder pulling the KV", 20*time.Second, func() bool { return r.decode.Stats().Transferring > 0 })
	if r.prefill.Stats().Engine.UsedBlocks == 0 {
		t.Fatal("prefill worker holds no blocks for the decoder's pull")
	}
	at := time.Now()
	cancel()
	r.checkReleased(t, at, 2)
}

func TestPDCancelMidStream(t *testing.T) {
	r := startPDRig(t, 10, 0.5, 100)
	resp, cancel := r.send(t, 4000)
	res := <-resp
	if res == nil || res.StatusCode != http.StatusOK {
		t.Fatalf("response %+v", res)
	}
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	at := time.Now()
	cancel()
	res.Body.Close()
	// The prefill leg closed as completed at the first token.
	r.checkReleased(t, at, 1)
	if st := r.decode.Stats().Engine; st.Aborted != 1 {
		t.Fatalf("decode engine aborted %d requests, want 1: %+v", st.Aborted, st)
	}
}
