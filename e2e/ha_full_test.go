//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The 1-vs-3-replica comparison (issue 9 item 1's measurement): two
// workloads on a fresh fleet three times — one replica, three replicas
// sharing load through Redis, three replicas with sharing off (each counts
// only its own load: the herding shared load prevents). It records the
// figures (KVGATE_HA_REPORT=/tmp/ha-replicas.md writes the tables); it
// asserts only what does not depend on this machine's timing: every
// request succeeds and every replica's accounting returns to zero.
func TestHAReplicaComparison(t *testing.T) {
	const (
		traceN, traceOut             = 300, 16
		traceSpan                    = 12 * time.Second
		groups, perGroup, prefixToks = 6, 30, 4096
		suffixToks                   = 1024
		burstSpread                  = 1500 * time.Millisecond
		burstOut                     = 32
	)
	trace := traceWorkload(haTrace(t, traceN), traceSpan, traceOut)
	warm, burst := burstWorkload(groups, perGroup, prefixToks, suffixToks, burstSpread, burstOut)
	runs := []struct {
		label    string
		replicas int
		share    bool
	}{{"1 replica", 1, true}, {"3 replicas, shared load", 3, true}, {"3 replicas, sharing off", 3, false}}
	var traceRes, burstRes []haResult
	for _, run := range runs {
		t.Run(run.label, func(t *testing.T) {
			f := startHAFleet(t, 4, 3, run.replicas, run.share)
			f.waitPeers(t)
			tr := f.run(t, run.label, trace)
			for i, w := range warm {
				if _, err := haRequest(t.Context(), f.gateway, w.tokens, w.out); err != nil {
					t.Fatalf("warm-up %d: %v", i, err)
				}
			}
			// Let the warm-up's KV events reach the index (event path and
			// the Redis registry snapshot, 250 ms): a settle, not an assertion.
			time.Sleep(2 * time.Second)
			br := f.run(t, run.label, burst)
			for _, r := range []haResult{tr, br} {
				if r.failed > 0 {
					t.Errorf("%d of %d requests failed", r.failed, r.requests)
				}
			}
			traceRes, burstRes = append(traceRes, tr), append(burstRes, br)
		})
	}
	if len(traceRes) != len(runs) {
		t.Fatal("a run failed to complete; no comparison")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## HA: 1 vs 3 extproc replicas\n\n")
	fmt.Fprintf(&b, "Command: `KVGATE_HA_REPORT=FILE go test -tags e2e -run TestHAReplicaComparison ./e2e/` (or `kvgate bench --only ha-replicas`). "+
		"Each run is a fresh fleet: 4 `kvgate enginesim` processes (speed-up %s, %d blocks of %d tokens each), one `kvgate indexer` writing a "+
		"standalone redis-server index, and 3 `kvgate extproc` processes reading it, of which the test's gateway (extproc/envoyharness) uses 1 or all 3, "+
		"spreading ext_proc streams over them round-robin as Envoy does (3 processes run in every case, so each run has the same CPU to share). Imbalance = max/mean requests per engine; CV = coefficient of variation "+
		"of per-engine computed prefill tokens (vllm:prompt_tokens_total − vllm:prefix_cache_hits_total; the simulator exports no busy time). "+
		"Baseline: the single replica, in the same run. TTFT is measured by the client through the gateway on a shared 2-core machine.\n\n",
		haSpeedup, haGPUBlocks, blockSize)
	fmt.Fprintf(&b, "**Trace**: the repository's Mooncake slice (`conversation_head300.jsonl`), %d requests, arrivals compressed into %v, outputs capped at %d tokens.\n\n", traceN, traceSpan, traceOut)
	formatHATable(&b, traceRes)
	fmt.Fprintf(&b, "**Hot-prefix burst**: %d groups × %d requests sharing a %d-token prefix (plus %d unique tokens each), each group spread over %v, interleaved; "+
		"one warm-up request per prefix first, so every replica's index shows one holder per prefix; outputs %d tokens.\n\n", groups, perGroup, prefixToks, suffixToks, burstSpread, burstOut)
	formatHATable(&b, burstRes)
	report := b.String()
	t.Log("\n" + report)
	if p := os.Getenv("KVGATE_HA_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
