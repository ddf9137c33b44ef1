//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// rssKiB reads a process's resident set size from /proc.
func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			n, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// Sixty full-duplex streams each send 8 MiB − 64 KiB (just under
// max_body_bytes) and never end, against the `kvgate extproc` binary with
// its default stream limits. Before the buffer budget this took the
// process from ~200 MB to ~1 GB (issue 15); now the budget refuses the
// bodies past it with 503, the idle deadline frees the rest, RSS growth
// stays under 300 MB, and ordinary requests are answered throughout.
func TestNeverEndingStreamsBoundedMemory(t *testing.T) {
	tokDir, err := modelfiles.Model(modelName)
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	defer backend.Close()
	worker := backend.Listener.Addr().String()
	listen, err1 := freeport.Addr()
	admin, err2 := freeport.Addr()
	if err := firstErr(err1, err2); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "kvgate.yaml")
	writeConfig(t, cfgPath, map[string]any{
		"models":  []map[string]any{{"name": modelName, "block_size": blockSize, "tokenizer": tokDir}},
		"engines": []map[string]any{{"endpoint": worker, "model": modelName}},
		"extproc": map[string]any{"listen": listen, "admin": admin, "health_check": map[string]any{"disabled": true},
			"engine_metrics": map[string]any{"disabled": true}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := procs.Start(t, "extproc", kvgateBin, "extproc", "--config", cfgPath, "--drain", "1s")
	if err := p.WaitHTTP(ctx, "http://"+admin+"/readyz"); err != nil {
		t.Fatal(err)
	}
	_, gw := envoyGateway(t, "envoy.yaml", envoyharness.ProxyOptions{ExtProc: []string{listen}, Workers: []string{worker}})
	normal := func() error {
		resp, err := httpClient.Post(gw+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+modelName+`","messages":[{"role":"user","content":"are you there?"}],"max_tokens":4}`))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	for range 5 {
		if err := normal(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	base := rssKiB(t, p.Pid())

	// Two connections, as an Envoy with two worker threads.
	var conns []*grpc.ClientConn
	for range 2 {
		c, err := grpc.NewClient(listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	const streams = 60
	const body = 8<<20 - 64<<10
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var refused, sentAll atomic.Int64
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := extprocv3.NewExternalProcessorClient(conns[i%2]).Process(ctx)
			if err != nil {
				return
			}
			hs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")}}}
			_ = s.Send(&extprocv3.ProcessingRequest{
				ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
				Request:        &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hs}}})
			got := make(chan *extprocv3.ProcessingResponse, 1)
			go func() {
				if m, err := s.Recv(); err == nil {
					got <- m
				}
			}()
			for sent := 0; sent < body; sent += len(chunk) {
				if s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk[:min(len(chunk), body-sent)]}}}) != nil {
					break
				}
			}
			sentAll.Add(1)
			select {
			case m := <-got:
				if m.GetImmediateResponse().GetStatus().GetCode() == http.StatusServiceUnavailable {
					refused.Add(1)
				}
			case <-ctx.Done():
			}
		}()
	}
	peak := base
	normalOK, normalFailed := 0, 0
	stopSampling := time.After(20 * time.Second)
sample:
	for {
		if r := rssKiB(t, p.Pid()); r > peak {
			peak = r
		}
		if err := normal(); err != nil {
			normalFailed++
			t.Logf("normal request during the flood: %v", err)
		} else {
			normalOK++
		}
		select {
		case <-stopSampling:
			break sample
		case <-time.After(200 * time.Millisecond):
		}
	}
	m, err := scrape("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MEMORY | %d never-ending streams × %d B | RSS before %d MB, peak %d MB, growth %d MB | refused 503: %d, buffered now %.0f MB | normal requests during: %d ok, %d failed",
		streams, body, base/1024, peak/1024, (peak-base)/1024, refused.Load(), m["kvgate_extproc_buffered_bytes"]/(1<<20), normalOK, normalFailed)
	if growth := (peak - base) / 1024; growth > 300 {
		t.Errorf("RSS grew by %d MB, over 300 MB", growth)
	}
	if normalFailed > 0 || normalOK == 0 {
		t.Errorf("normal requests during the flood: %d ok, %d failed", normalOK, normalFailed)
	}
	if refused.Load() == 0 {
		t.Error("no stream refused: the budget never bit")
	}
	cancel()
	wg.Wait()
}
