package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/replay"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

// Several `kvgate extproc` replicas behind one gateway (issue 9 item 1):
// real engine simulators, one `kvgate indexer` writing a real redis-server
// index, N extproc processes reading it, and a gateway that spreads the
// ext_proc streams over the replicas round-robin as Envoy does over the
// hosts of a processor cluster.

type haFleet struct {
	engines   []*engine
	admins    []string  // extproc admin host:port, per replica
	wantPeers []float64 // kvgate_extproc_shared_load_peers each should reach
	gateway   string
}

// haGPUBlocks gives each engine 1 Mi tokens of KV (the Dynamo mocker's
// default capacity), so the trace's prefix reuse fits in the fleet's cache
// and routing by cache matters.
const haGPUBlocks = 65536

// haSharedInterval is extproc.shared_load.interval for these runs: the
// shipped default, unless KVGATE_HA_SHARED_INTERVAL says otherwise (to
// measure another; the config parser validates it).
func haSharedInterval() string {
	if v := os.Getenv("KVGATE_HA_SHARED_INTERVAL"); v != "" {
		return v
	}
	return "50ms"
}

// haSpeedup keeps the simulated engines slow enough that load matters:
// where a replica sends a request changes how long it queues.
const haSpeedup = "2"

func startHAEngine(t *testing.T, i int, tokDir string) *engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		addr, err1 := freeport.Addr()
		ev, err2 := freeport.Addr()
		rep, err3 := freeport.Addr()
		if err := firstErr(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		e := &engine{endpoint: addr, events: "tcp://" + ev, replay: "tcp://" + rep}
		e.proc = procs.Start(t, fmt.Sprintf("engine%d", i), labBin, "enginesim",
			"--listen", addr, "--model", modelName, "--tokenizer", tokDir,
			"--block-size", strconv.Itoa(blockSize), "--gpu-blocks", strconv.Itoa(haGPUBlocks), "--speedup", haSpeedup,
			"--kv-events-endpoint", e.events, "--kv-events-replay", e.replay,
			"--seed", strconv.Itoa(i+1), "--drain", "2s")
		err := e.proc.WaitHTTP(ctx, "http://"+addr+"/health")
		if err == nil {
			return e
		}
		if attempt == startAttempts || ctx.Err() != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
	}
}

// startHAFleet starts processes extproc replicas and routes through the
// first use of them. Starting the same processes for every run keeps the
// CPU they take equal (each has its own health, engine-metrics and
// shared-load loops), so that on a small shared machine a 1-replica
// baseline is not favoured by having fewer processes to schedule.
func startHAFleet(t *testing.T, engines, processes, use int, share bool) *haFleet {
	t.Helper()
	modes := make([]bool, processes)
	for i := range modes {
		modes[i] = share
	}
	f, hs := startHAProcesses(t, engines, modes)
	f.gateway = haGateway(t, f, hs[:use])
	return f
}

// haGateway serves envoy.yaml with the extproc replicas at listens as its
// ext_proc cluster (round robin over the healthy ones, as Envoy spreads
// streams) and f's engines as its workers.
func haGateway(t *testing.T, f *haFleet, listens []string) string {
	t.Helper()
	var workers []string
	for _, e := range f.engines {
		workers = append(workers, e.endpoint)
	}
	_, url := debugGateway(t, "envoy.yaml", envoyharness.ProxyOptions{ExtProc: listens, Workers: workers})
	return url
}

// startHAProcesses starts the engines, the indexer and one extproc process
// per entry of share (true: it shares load through Redis with the other
// sharing processes; false: it counts only its own), and returns a harness
// per extproc process, in order: its gRPC listen address.
func startHAProcesses(t *testing.T, engines int, share []bool) (*haFleet, []string) {
	t.Helper()
	tokDir, err := modelfiles.Model(modelName)
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	rds := redistest.Standalone(t)
	f := &haFleet{}
	sharing := 0
	for _, s := range share {
		if s {
			sharing++
		}
	}
	var engs []map[string]any
	for i := range engines {
		e := startHAEngine(t, i, tokDir)
		f.engines = append(f.engines, e)
		engs = append(engs, map[string]any{"endpoint": e.endpoint, "model": modelName, "events": e.events, "replay": e.replay})
	}
	indexer := map[string]any{}
	sharedLoad := map[string]any{"disabled": false, "interval": haSharedInterval()}
	extproc := map[string]any{
		"health_check":  map[string]any{"interval": "200ms", "timeout": "1s", "unhealthy_after": 2},
		"index_timeout": "2s",
		"shared_load":   sharedLoad,
		// The tests read each decision from x-kvgate-debug (off by default).
		"debug_header": map[string]any{"allow_any_client": true},
	}
	cfg := map[string]any{
		"models":  []map[string]any{{"name": modelName, "block_size": blockSize, "tokenizer": tokDir}},
		"engines": engs,
		"extproc": extproc,
		"indexer": indexer,
		"index":   map[string]any{"backend": "redis", "redis": map[string]any{"addrs": []string{rds.Addr()}, "prefix": "ha:"}},
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "kvgate.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 2*readyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		at, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		indexer["listen"] = at
		writeConfig(t, cfgPath, cfg)
		p := procs.Start(t, "indexer", kvgateBin, "indexer", "--config", cfgPath)
		if err := p.WaitHTTP(ctx, "http://"+at+"/readyz"); err == nil {
			break
		} else if attempt == startAttempts {
			t.Fatalf("indexer: %v", err)
		}
		p.Stop()
	}
	// The extproc processes differ only in shared_load.disabled.
	sharedLoad["disabled"] = true
	unsharedPath := filepath.Join(dir, "kvgate-unshared.yaml")
	writeConfig(t, unsharedPath, cfg)
	var hs []string
	for r, sh := range share {
		path := cfgPath
		if !sh {
			path = unsharedPath
		}
		for attempt := 1; ; attempt++ {
			listen, err1 := freeport.Addr()
			admin, err2 := freeport.Addr()
			if err := firstErr(err1, err2); err != nil {
				t.Fatal(err)
			}
			p := procs.Start(t, fmt.Sprintf("extproc%d", r), kvgateBin, "extproc", "--config", path, "--listen", listen, "--admin", admin, "--drain", "2s")
			err := p.WaitHTTP(ctx, "http://"+admin+"/readyz")
			if err == nil {
				hs = append(hs, listen)
				f.admins = append(f.admins, admin)
				if sh {
					f.wantPeers = append(f.wantPeers, float64(sharing-1))
				} else {
					f.wantPeers = append(f.wantPeers, 0)
				}
				break
			}
			if attempt == startAttempts {
				t.Fatalf("extproc %d: %v", r, err)
			}
			p.Stop()
		}
	}
	return f, hs
}

// waitPeers waits until every sharing replica adds the other sharing
// replicas' load.
func (f *haFleet) waitPeers(t *testing.T) {
	t.Helper()
	for i, admin := range f.admins {
		want := f.wantPeers[i]
		waitFor(t, "replica "+admin+" sees its peers", 30*time.Second, func() error {
			m, err := scrape("http://" + admin + "/metrics")
			if err != nil {
				return err
			}
			if got := m["kvgate_extproc_shared_load_peers"]; got != want {
				return fmt.Errorf("kvgate_extproc_shared_load_peers = %v, want %v", got, want)
			}
			return nil
		})
	}
}

func (f *haFleet) waitIdle(t *testing.T) {
	t.Helper()
	for _, admin := range f.admins {
		waitFor(t, "replica "+admin+" releases every ticket", 30*time.Second, func() error {
			m, err := scrape("http://" + admin + "/metrics")
			if err != nil {
				return err
			}
			if v := m["kvgate_extproc_open_tickets"]; v != 0 {
				return fmt.Errorf("kvgate_extproc_open_tickets = %v", v)
			}
			return nil
		})
	}
}

// engineWork is what each engine reports having done, and the engines'
// and the replicas' own latency histograms.
type engineWork struct {
	served, prompt, hits []float64
	// Engine-side TTFT (vllm:time_to_first_token_seconds, every engine
	// summed): arrival at the engine to first token, so queueing there —
	// which routing decides — without the gateway's and kvgate's CPU time.
	ttftBuckets          map[float64]float64 // upper bound → cumulative count
	ttftSum, ttftCount   float64
	decisionSum, decided float64 // kvgate_extproc_decision_duration_seconds, every replica summed
}

func (f *haFleet) work(t *testing.T) engineWork {
	t.Helper()
	w := engineWork{ttftBuckets: map[float64]float64{}}
	for _, e := range f.engines {
		url := "http://" + e.endpoint + "/metrics"
		m, err := scrape(url)
		if err != nil {
			t.Fatalf("engine %s metrics: %v", e.endpoint, err)
		}
		w.served = append(w.served, m["vllm:request_success_total"])
		w.prompt = append(w.prompt, m["vllm:prompt_tokens_total"])
		w.hits = append(w.hits, m["vllm:prefix_cache_hits_total"])
		w.ttftSum += m["vllm:time_to_first_token_seconds_sum"]
		w.ttftCount += m["vllm:time_to_first_token_seconds_count"]
		b, err := scrapeBuckets(url, "vllm:time_to_first_token_seconds_bucket")
		if err != nil {
			t.Fatalf("engine %s metrics: %v", e.endpoint, err)
		}
		for le, n := range b {
			w.ttftBuckets[le] += n
		}
	}
	for _, admin := range f.admins {
		m, err := scrape("http://" + admin + "/metrics")
		if err != nil {
			t.Fatalf("replica %s metrics: %v", admin, err)
		}
		w.decisionSum += m["kvgate_extproc_decision_duration_seconds_sum"]
		w.decided += m["kvgate_extproc_decision_duration_seconds_count"]
	}
	return w
}

// scrapeBuckets reads one histogram's buckets from a Prometheus text
// page, summed over its other labels: upper bound → cumulative count.
func scrapeBuckets(url, name string) (map[float64]float64, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[float64]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.LastIndexByte(line, '}')
		if i < 0 || j < i {
			return nil, fmt.Errorf("GET %s: bucket without le: %q", url, line)
		}
		bound := line[i+4:]
		bound = bound[:strings.IndexByte(bound, '"')]
		le, err := strconv.ParseFloat(strings.Replace(bound, "+Inf", "Inf", 1), 64)
		if err != nil {
			return nil, fmt.Errorf("GET %s: le in %q: %w", url, line, err)
		}
		fields := strings.Fields(line[j+1:])
		if len(fields) == 0 {
			return nil, fmt.Errorf("GET %s: malformed sample %q", url, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("GET %s: sample %q: %w", url, line, err)
		}
		out[le] += v
	}
	return out, sc.Err()
}

// histogramQuantile is Prometheus' histogram_quantile over the difference
// of two cumulative bucket sets: linear within the bucket the quantile
// falls in (the lower bound of the first bucket is 0).
func histogramQuantile(q float64, before, after map[float64]float64) float64 {
	bounds := make([]float64, 0, len(after))
	for le := range after {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return 0
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, le := range bounds {
		c := after[le] - before[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return prevBound
			}
			if c == prevCount {
				return le
			}
			return prevBound + (le-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = le, c
	}
	return prevBound
}

// haResult is one run's figures.
type haResult struct {
	label                 string
	requests, failed      int
	ttftP50, ttftP90      time.Duration
	maxOverMean, cvTokens float64
	hitRatio              float64
	// Engine-side TTFT (queueing and prefill in the engines only) and
	// kvgate's mean decision time.
	engineTTFTMean, engineTTFTP90 time.Duration
	decisionMean                  time.Duration
}

// haRequest is one streamed completion of token ids; it returns the
// time to the first token.
func haRequest(ctx context.Context, base string, tokens []uint32, maxTokens int) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"model": modelName, "prompt": tokens, "max_tokens": maxTokens, "stream": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("content-type", "application/json")
	start := time.Now()
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var ttft time.Duration
	done := false
	for sc.Scan() {
		line := sc.Text()
		if ttft == 0 && strings.HasPrefix(line, "data: {") {
			ttft = time.Since(start)
		}
		done = done || line == "data: [DONE]"
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if ttft == 0 || !done {
		return 0, fmt.Errorf("stream ended without tokens or [DONE]")
	}
	return ttft, nil
}

// haReq is one request of a workload: when it is sent (from the start),
// its prompt's token ids and its output length.
type haReq struct {
	at     time.Duration
	tokens []uint32
	out    int
}

// traceWorkload is the trace's requests with their arrivals compressed
// into span and outputs capped at maxTokens.
func traceWorkload(reqs []replay.TraceRequest, span time.Duration, maxTokens int) []haReq {
	scale := 0.0
	if last := reqs[len(reqs)-1].Timestamp - reqs[0].Timestamp; last > 0 {
		scale = float64(span) / float64(time.Duration(last)*time.Millisecond)
	}
	out := make([]haReq, len(reqs))
	for i, r := range reqs {
		out[i] = haReq{at: time.Duration(float64(time.Duration(r.Timestamp-reqs[0].Timestamp)*time.Millisecond) * scale),
			tokens: replay.Tokens(nil, r), out: max(1, min(r.OutputLength, maxTokens))}
	}
	return out
}

// burstWorkload is the case replicas herd on: groups of requests sharing
// one long prefix (a popular system prompt, a shared document) arrive
// together, interleaved, each group spread over spread. Deterministic.
func burstWorkload(groups, perGroup, prefixTokens, suffixTokens int, spread time.Duration, maxTokens int) (warm, burst []haReq) {
	for g := range groups {
		prefix := make([]uint32, prefixTokens)
		for i := range prefix {
			prefix[i] = uint32(1000 + (g*7919+i*31)%50000)
		}
		warm = append(warm, haReq{tokens: append(append([]uint32(nil), prefix...), 60000), out: 1})
		for k := range perGroup {
			tokens := append([]uint32(nil), prefix...)
			for j := range suffixTokens {
				tokens = append(tokens, uint32(1000+(g*104729+k*7207+j*131)%50000))
			}
			burst = append(burst, haReq{at: spread * time.Duration(k) / time.Duration(perGroup), tokens: tokens, out: maxTokens})
		}
	}
	slices.SortStableFunc(burst, func(a, b haReq) int { return int(a.at - b.at) })
	return warm, burst
}

// runVia sends the workload through the gateway at base on its schedule
// and measures what clients and engines saw.
func (f *haFleet) runVia(t *testing.T, base, label string, reqs []haReq) haResult {
	t.Helper()
	before := f.work(t)
	ttfts := make([]time.Duration, len(reqs))
	errs := make([]error, len(reqs))
	start := time.Now()
	var wg sync.WaitGroup
	for i, r := range reqs {
		time.Sleep(time.Until(start.Add(r.at)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttfts[i], errs[i] = haRequest(context.Background(), base, r.tokens, r.out)
		}()
	}
	wg.Wait()
	f.waitIdle(t)
	after := f.work(t)
	res := haResult{label: label, requests: len(reqs)}
	var ok []time.Duration
	for i := range reqs {
		if errs[i] != nil {
			res.failed++
			t.Logf("%s: request %d: %v", label, i, errs[i])
			continue
		}
		ok = append(ok, ttfts[i])
	}
	slices.Sort(ok)
	if len(ok) > 0 {
		res.ttftP50 = ok[min(len(ok)-1, len(ok)/2)]
		res.ttftP90 = ok[min(len(ok)-1, int(math.Ceil(0.9*float64(len(ok))))-1)]
	}
	var served, computed []float64
	prompt, hits := 0.0, 0.0
	for i := range f.engines {
		served = append(served, after.served[i]-before.served[i])
		p, h := after.prompt[i]-before.prompt[i], after.hits[i]-before.hits[i]
		computed = append(computed, p-h)
		prompt, hits = prompt+p, hits+h
	}
	res.maxOverMean = maxOverMean(served)
	res.cvTokens = coefficientOfVariation(computed)
	if prompt > 0 {
		res.hitRatio = hits / prompt
	}
	seconds := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	if n := after.ttftCount - before.ttftCount; n > 0 {
		res.engineTTFTMean = seconds((after.ttftSum - before.ttftSum) / n)
		res.engineTTFTP90 = seconds(histogramQuantile(0.9, before.ttftBuckets, after.ttftBuckets))
	}
	if n := after.decided - before.decided; n > 0 {
		res.decisionMean = seconds((after.decisionSum - before.decisionSum) / n)
	}
	t.Logf("%s: served per engine %v, computed prefill tokens per engine %v", label, served, computed)
	return res
}

func maxOverMean(v []float64) float64 {
	sum, most := 0.0, 0.0
	for _, x := range v {
		sum, most = sum+x, max(most, x)
	}
	if sum == 0 {
		return 0
	}
	return most / (sum / float64(len(v)))
}

func coefficientOfVariation(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	mean := 0.0
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if mean == 0 {
		return 0
	}
	ss := 0.0
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss/float64(len(v))) / mean
}

// The short variant in `make test`: three replicas find each other through
// Redis, a burst of requests sharing one long prefix goes through all of
// them, every request succeeds, and every replica's accounting returns to
// zero.
func TestReplicasShareLoadThroughRedis(t *testing.T) {
	f := startHAFleet(t, 2, 3, 3, true)
	f.waitPeers(t)
	prefix := make([]uint32, 1024)
	for i := range prefix {
		prefix[i] = uint32(1000 + i)
	}
	var wg sync.WaitGroup
	errs := make([]error, 24)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tokens := append(append([]uint32(nil), prefix...), uint32(30000+i), uint32(31000+i))
			_, errs[i] = haRequest(context.Background(), f.gateway, tokens, 4)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	f.waitIdle(t)
	w := f.work(t)
	total := 0.0
	for _, n := range w.served {
		total += n
	}
	if total != float64(len(errs)) {
		t.Fatalf("engines served %v requests, want %d", w.served, len(errs))
	}
}

// haTrace is the trace the HA comparison replays: the repository's
// 300-request slice of the Mooncake conversation trace.
func haTrace(t *testing.T, n int) []replay.TraceRequest {
	t.Helper()
	reqs, err := replay.LoadTrace(filepath.Join("..", "lab", "replay", "testdata", "conversation_head300.jsonl"), n)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func formatHATable(b *strings.Builder, results []haResult) {
	b.WriteString("| run | ok / sent | TTFT p50 ms | TTFT p90 ms | p90 vs 1 replica | engine TTFT mean ms | engine TTFT p90 ms | decision mean ms | imbalance | CV computed tokens | hit ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	base := results[0]
	for _, r := range results {
		ratio := 0.0
		if base.ttftP90 > 0 {
			ratio = float64(r.ttftP90) / float64(base.ttftP90)
		}
		fmt.Fprintf(b, "| %s | %d / %d | %.0f | %.0f | %.2f× | %.0f | %.0f | %.1f | %.2f | %.2f | %.3f |\n", r.label, r.requests-r.failed, r.requests,
			ms(r.ttftP50), ms(r.ttftP90), ratio, ms(r.engineTTFTMean), ms(r.engineTTFTP90), ms(r.decisionMean), r.maxOverMean, r.cvTokens, r.hitRatio)
	}
	b.WriteString("\n")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
