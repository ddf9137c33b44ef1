package e2e

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/procs"
)

// An extproc holding the index in memory that is killed and restarted must
// rebuild the index from the engines' replay buffers before it reports
// ready, so its very first request is routed cache-aware (Dynamo #1056:
// a restarted router forgot the fleet's KV state).
func TestExtprocRestartRebuildsMemoryIndexBeforeReady(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 3})
	holder, prefix := checkPrefixAffinity(t, f, f.admin, 41)

	f.extproc.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	p := procs.Start(t, "extproc-restarted", kvgateBin, "extproc", "--config", f.cfgPath, "--drain", "2s")
	if err := p.WaitHTTP(ctx, "http://"+f.admin+"/readyz"); err != nil {
		t.Fatalf("restarted extproc: %v", err)
	}
	f.extproc = p

	// No wait for the index here: ready must already mean rebuilt.
	rng := rand.New(rand.NewPCG(41, 2))
	before := f.engineCounters(t)
	r, err := f.complete(concat(prefix, randomTokens(rng, 40)), 4, true)
	if err != nil {
		t.Fatal(err)
	}
	dbg := r.header.Get("x-kvgate-debug")
	if got := servedBy(t, before, f.engineCounters(t)); got != holder {
		t.Fatalf("first request after the restart went to engine %d, the prefix is on engine %d; debug: %s", got, holder, dbg)
	}
	if cached := cachedBlocksOf(candidateOf(dbg, f.engines[holder].endpoint)); cached < sharedPrefixBlocks-1 {
		t.Fatalf("first request after the restart: the index credits the holder with %d cached blocks, want >= %d (debug: %s)", cached, sharedPrefixBlocks-1, dbg)
	}
	m, err := scrape("http://" + f.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if m["kvgate_indexer_batches_replayed_total"] == 0 {
		t.Error("the restarted extproc holds the prefix without having replayed a batch from the engines")
	}
	f.waitNoOpenTickets(t)
}

// candidateOf returns the debug header's entry for the worker at endpoint.
func candidateOf(dbg, endpoint string) string {
	for _, part := range strings.Split(dbg, "; ") {
		if strings.HasPrefix(part, endpoint) {
			return part
		}
	}
	return ""
}

// cachedBlocksOf reads "cached_device=N" (the prefix the index matched on
// the worker's device) from one candidate of the debug header; -1 when
// absent.
func cachedBlocksOf(candidate string) int {
	_, rest, ok := strings.Cut(candidate, "cached_device=")
	if !ok {
		return -1
	}
	if i := strings.IndexAny(rest, " ;"); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return -1
	}
	return n
}
