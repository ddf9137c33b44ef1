package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// chaosOutcome is one request of the steady stream a chaos test keeps up
// while it breaks a process.
type chaosOutcome struct {
	start, end time.Time
	status     int
	chosen     string // the extproc's choice (x-kvgate-debug), "" if no headers came back
	cached     int    // usage.prompt_tokens_details.cached_tokens
	err        error
}

// chaosLoad is a few clients sending streamed completions back to back
// through the gateway. Prompts share one of a few long prefixes, so the
// index matters to where they go.
type chaosLoad struct {
	f        *chaosFleet
	prefixes [][]int
	mu       sync.Mutex
	out      []chaosOutcome
	inflight map[int]time.Time // client → start of its open request
	stop     context.CancelFunc
	done     sync.WaitGroup
}

const (
	chaosClients      = 4
	chaosPrefixBlocks = 8
	chaosMaxTokens    = 48
)

func startChaosLoad(t *testing.T, f *chaosFleet, seed uint64) *chaosLoad {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	l := &chaosLoad{f: f, inflight: map[int]time.Time{}}
	for range 6 {
		l.prefixes = append(l.prefixes, randomTokens(rng, chaosPrefixBlocks*blockSize))
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	for c := range chaosClients {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for ctx.Err() == nil {
				// Half share a prefix (cache-aware routing), half are
				// fresh (load-balanced: how a restarted engine, whose
				// cache is empty, gets traffic again).
				prompt := randomTokens(rng, chaosPrefixBlocks*blockSize+24)
				if rng.IntN(2) == 0 {
					prompt = concat(l.prefixes[rng.IntN(len(l.prefixes))], randomTokens(rng, 24))
				}
				l.mu.Lock()
				l.inflight[c] = time.Now()
				l.mu.Unlock()
				o := chaosRequest(f.gateway, prompt)
				l.mu.Lock()
				delete(l.inflight, c)
				l.out = append(l.out, o)
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.finish)
	return l
}

// finish stops the clients and waits for their last requests.
func (l *chaosLoad) finish() {
	l.stop()
	l.done.Wait()
}

// outcomes is a copy of what finished so far.
func (l *chaosLoad) outcomes() []chaosOutcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]chaosOutcome(nil), l.out...)
}

// waitOK waits until count requests started after since have succeeded
// and returns when the first of them started (recovery time = that − since).
func (l *chaosLoad) waitOK(t *testing.T, since time.Time, count int, what string) time.Time {
	t.Helper()
	var first time.Time
	waitFor(t, what, 60*time.Second, func() error {
		n := 0
		first = time.Time{}
		for _, o := range l.outcomes() {
			if o.err == nil && o.start.After(since) {
				n++
				if first.IsZero() || o.start.Before(first) {
					first = o.start
				}
			}
		}
		if n < count {
			return fmt.Errorf("%d requests started after %s succeeded, want %d", n, since.Format(time.StampMilli), count)
		}
		return nil
	})
	return first
}

// chaosRequest is one streamed completion of token ids with the routing
// debug header; a failure is any non-200, a transport error, or a stream
// that ends without [DONE].
func chaosRequest(gateway string, tokens []int) chaosOutcome {
	o := chaosOutcome{start: time.Now()}
	defer func() { o.end = time.Now() }()
	body, _ := json.Marshal(map[string]any{"model": modelName, "prompt": tokens, "max_tokens": chaosMaxTokens,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	req, _ := http.NewRequest(http.MethodPost, gateway+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-kvgate-debug", "1")
	resp, err := httpClient.Do(req)
	if err != nil {
		o.err = err
		o.end = time.Now()
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	o.chosen = chosenWorker(resp.Header.Get("x-kvgate-debug"))
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o.err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
		o.end = time.Now()
		return o
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			done = true
			continue
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"usage"`) {
			var ev struct {
				Usage *usage `json:"usage"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Usage != nil {
				o.cached = ev.Usage.cached()
			}
		}
	}
	switch {
	case sc.Err() != nil:
		o.err = fmt.Errorf("stream broken: %w", sc.Err())
	case !done:
		o.err = fmt.Errorf("stream ended without [DONE]")
	}
	o.end = time.Now()
	return o
}

// chaosTally counts a run's requests around a fault at killedAt.
type chaosTally struct {
	sent, ok, failed int
	inFlightAtKill   int // requests open on the whole fleet at killedAt
	failedAfterKill  int // failed requests that started after killedAt
}

// A kill is a window, not an instant: from the signal (signaledAt) to the
// process's exit (killedAt). A request was in flight on it when it started
// before the exit and ended after the signal.
func tally(outs []chaosOutcome, signaledAt, killedAt time.Time) chaosTally {
	var c chaosTally
	for _, o := range outs {
		c.sent++
		if o.start.Before(killedAt) && o.end.After(signaledAt) {
			c.inFlightAtKill++
		}
		if o.err == nil {
			c.ok++
			continue
		}
		c.failed++
		if !o.start.Before(killedAt) {
			c.failedAfterKill++
		}
	}
	return c
}

// checkFailuresInFlightOn asserts the lost requests are only ones open at
// killedAt and, where the extproc's choice is known, routed to victim (an
// engine endpoint; "" when the victim is not an engine).
//
// grace extends "in flight" to requests started that long after the kill:
// a client that has not yet seen the connection close may still open a
// stream on it (zero for engine kills, where the gateway walks fallbacks).
func checkFailuresInFlightOn(t *testing.T, outs []chaosOutcome, signaledAt, killedAt time.Time, grace time.Duration, victim string) {
	t.Helper()
	for _, o := range outs {
		if o.err == nil {
			continue
		}
		if !o.start.Before(killedAt.Add(grace)) || !o.end.After(signaledAt) {
			t.Errorf("request %s–%s failed but was not in flight at the kill (signal %s, exit %s): %v",
				o.start.Format(time.StampMilli), o.end.Format(time.StampMilli), signaledAt.Format(time.StampMilli), killedAt.Format(time.StampMilli), o.err)
			continue
		}
		if victim != "" && o.chosen != "" && !isWorker(o.chosen, victim) {
			t.Errorf("request routed to %s failed, only %s was killed: %v", o.chosen, victim, o.err)
		}
	}
}

// chaosRow is one line of RELIABILITY.md's table, logged by each test so
// the table is copied from a real run.
func logChaosRow(t *testing.T, fault string, c chaosTally, bound string, recovery, stale string) {
	t.Helper()
	t.Logf("RELIABILITY | %s | %d | %d | %d | %d (%s) | %s | %s |", fault, c.sent, c.ok, c.failed, c.inFlightAtKill, bound, recovery, stale)
}

// workerBlocks reads kvgate_indexer_worker_blocks per worker label from a
// metrics endpoint.
func workerBlocks(metricsAt string) (map[string]float64, error) {
	resp, err := httpClient.Get("http://" + metricsAt + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "kvgate_indexer_worker_blocks{")
		if !ok {
			continue
		}
		_, rest, ok := strings.Cut(line, `worker="`)
		if !ok {
			return nil, fmt.Errorf("kvgate_indexer_worker_blocks without a worker label: %q", line)
		}
		worker, rest, _ := strings.Cut(rest, `"`)
		var v float64
		if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, '}')+1:], &v); err != nil {
			return nil, fmt.Errorf("kvgate_indexer_worker_blocks %q: %w", line, err)
		}
		out[worker] += v
	}
	return out, sc.Err()
}

// checkIndexMatchesEngines compares, for each prefix, what the index
// credits every engine with (x-kvgate-debug cached_device=) against what each
// engine's own prefix cache holds (cached_tokens of a 1-token request sent
// to the engine directly, which adds no block of the prefix it did not
// have). Equal means neither stale nor missing entries for those blocks.
//
// It returns the (prefix, engine) pairs where the index credits more than
// the engine holds (stale) and fewer (missing), each described.
func (cf *chaosFleet) compareIndexWithEngines(t *testing.T, prefixes [][]int) (stale, missing []string) {
	t.Helper()
	for pi, p := range prefixes {
		// Probe the index first: the direct engine probes below store
		// the prefix on every engine.
		r, err := cf.complete(p, 1, true)
		if err != nil {
			t.Fatalf("probe %d through the gateway: %v", pi, err)
		}
		dbg := r.header.Get("x-kvgate-debug")
		indexed := map[string]int{}
		for _, e := range cf.engines {
			indexed[e.endpoint] = max(0, cachedBlocksOf(candidateOf(dbg, e.endpoint)))
		}
		chosen := chosenWorker(dbg)
		for _, e := range cf.engines {
			want := 0
			if isWorker(chosen, e.endpoint) {
				// The probe itself ran there; compare against the
				// cache hit it reported instead.
				want = r.usage.cached() / blockSize
			} else {
				got, err := cf.directProbe(e, p)
				if err != nil {
					t.Fatalf("probe %d on %s: %v", pi, e.endpoint, err)
				}
				want = got / blockSize
			}
			// The engine never reports the last block of a prompt as a
			// hit (it recomputes at least one token); the index credits
			// whole blocks. Both views must agree up to that one block.
			d := indexed[e.endpoint] - want
			desc := fmt.Sprintf("prefix %d on %s: the index credits %d blocks, the engine's cache holds %d", pi, e.endpoint, indexed[e.endpoint], want)
			switch {
			case d > 1 || (d == 1 && want != len(p)/blockSize-1):
				stale = append(stale, desc)
			case d < 0:
				missing = append(missing, desc)
			}
		}
	}
	return stale, missing
}

// checkIndexMatchesEngines fails t unless the index equals the engines'
// caches for prefixes: no stale and no missing entry.
func (cf *chaosFleet) checkIndexMatchesEngines(t *testing.T, prefixes [][]int) {
	t.Helper()
	stale, missing := cf.compareIndexWithEngines(t, prefixes)
	for _, s := range stale {
		t.Errorf("stale index entry: %s", s)
	}
	for _, m := range missing {
		t.Errorf("missing index entry: %s", m)
	}
}

func (cf *chaosFleet) directProbe(e *engine, tokens []int) (int, error) {
	b, _ := json.Marshal(map[string]any{"model": modelName, "prompt": tokens, "max_tokens": 1})
	resp, err := httpClient.Post("http://"+e.endpoint+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var parsed struct {
		Usage *usage `json:"usage"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&parsed); err != nil || parsed.Usage == nil {
		return 0, fmt.Errorf("status %d, no usage (%v)", resp.StatusCode, err)
	}
	return parsed.Usage.cached(), nil
}

// chosenWorker extracts "chosen=…" from the x-kvgate-debug header (the
// e2e-tagged chosenOf does the same; this one is in the normal build).
func chosenWorker(dbg string) string {
	rest, ok := strings.CutPrefix(dbg, "chosen=")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, " ;"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// isWorker reports whether a worker id (host:port#rank, as the index and
// the debug header name workers) is the engine at endpoint.
func isWorker(id, endpoint string) bool {
	return id == endpoint || strings.HasPrefix(id, endpoint+"#")
}

// blocksOf sums the per-worker block counts of the engine at endpoint.
func blocksOf(wb map[string]float64, endpoint string) float64 {
	n := 0.0
	for w, v := range wb {
		if isWorker(w, endpoint) {
			n += v
		}
	}
	return n
}
