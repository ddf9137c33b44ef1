//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

// The full suite (`make e2e`): more engines, a Redis Cluster index with a
// separate `kvgate indexer`, and processes killed under the system.

func TestMemoryIndexFourEngines(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 4})
	t.Run("RequestsReachThePrefixHolder", func(t *testing.T) { checkPrefixAffinity(t, f, f.admin, 11) })
	t.Run("StreamingThroughTheGateway", func(t *testing.T) { checkStreaming(t, f) })
	t.Run("LoadReleasedAfterConcurrentRequests", func(t *testing.T) { checkConcurrentRelease(t, f) })
	t.Run("LoadReleasedAfterClientCancelsMidStream", func(t *testing.T) { checkCancelRelease(t, f) })
}

// A SIGKILLed engine fails the extproc's health probes and gets no more
// requests, even those whose prefix only it held.
func TestKilledEngineLeavesRouting(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 3})
	holder, prefix := checkPrefixAffinity(t, f, f.admin, 21)
	dead := f.engines[holder]
	dead.proc.Kill()
	rng := rand.New(rand.NewPCG(21, 1))
	// Until the probes fail, requests for the dead engine fall back to
	// the next candidate (the gateway walks fallbacks on connect errors,
	// as Envoy's override_host does); none may fail.
	waitFor(t, "extproc marks the killed engine unhealthy", 30*time.Second, func() error {
		r, err := f.complete(randomTokens(rng, 64), 2, true)
		if err != nil {
			t.Fatalf("request while the engine is down: %v", err)
		}
		if dbg := r.header.Get("x-kvgate-debug"); !strings.Contains(dbg, dead.endpoint) || !strings.Contains(candidateOf(dbg, dead.endpoint), "ineligible=unhealthy") {
			return fmt.Errorf("x-kvgate-debug: %q", dbg)
		}
		return nil
	})
	for i := range 8 {
		prompt := randomTokens(rng, 64)
		if i%2 == 0 {
			prompt = concat(prefix, randomTokens(rng, 40)) // only the dead engine held this prefix
		}
		before := f.engineCounters(t)
		r, err := f.complete(prompt, 2, true)
		if err != nil {
			t.Fatalf("request %d after the kill: %v", i, err)
		}
		chosen := chosenOf(r.header.Get("x-kvgate-debug"))
		if chosen == "" || strings.Contains(chosen, dead.endpoint) {
			t.Fatalf("request %d: extproc chose %q (debug %q); %s is dead", i, chosen, r.header.Get("x-kvgate-debug"), dead.endpoint)
		}
		if got := servedBy(t, before, f.engineCounters(t)); got == holder {
			t.Fatalf("request %d counted by the dead engine", i)
		}
	}
	f.waitNoOpenTickets(t)
}

// chosenOf extracts "chosen=…" from the x-kvgate-debug header.
func chosenOf(dbg string) string {
	rest, ok := strings.CutPrefix(dbg, "chosen=")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, " ;"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// With a Redis Cluster index, `kvgate indexer` and `kvgate extproc` are
// separate processes; killing and restarting the indexer must leave the
// index routing cache-aware for a prefix stored before the restart.
func TestRedisClusterIndexerRestart(t *testing.T) {
	cluster := redistest.NewCluster(t, redistest.ClusterOptions{Masters: 3})
	const workerTTL = 2 * time.Second
	f := startFleet(t, fleetOptions{engines: 3, redisAddrs: cluster.Addrs(), workerTTL: workerTTL})
	holder, prefix := checkPrefixAffinity(t, f, f.indexerAt, 31)

	f.indexer.Kill()
	// Down longer than worker_ttl: without a heartbeating indexer the
	// workers vanish from matches, so routing after the restart relies on
	// what the new indexer re-establishes.
	time.Sleep(workerTTL + time.Second)
	ctx2, cancel2 := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel2()
	if f.indexer = f.startIndexer(ctx2); f.indexer == nil {
		t.Fatal("indexer did not restart on its port")
	}
	f.waitIndexed(t, f.indexerAt, sharedPrefixBlocks)
	m, err := scrape("http://" + f.indexerAt + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if m["kvgate_indexer_batches_replayed_total"] == 0 {
		t.Error("the restarted indexer holds the prefix without replaying any batch from the engines")
	}

	rng := rand.New(rand.NewPCG(31, 2))
	for i := range 3 {
		before := f.engineCounters(t)
		r, err := f.complete(concat(prefix, randomTokens(rng, 40)), 4, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := servedBy(t, before, f.engineCounters(t)); got != holder {
			t.Fatalf("after the indexer restart, follow-up %d went to engine %d, the prefix is on engine %d", i, got, holder)
		}
		if c := r.usage.cached(); c < sharedPrefixTokens-blockSize {
			t.Errorf("after the indexer restart, follow-up %d: %d cached tokens, want >= %d", i, c, sharedPrefixTokens-blockSize)
		}
	}
	t.Run("StreamingThroughTheGateway", func(t *testing.T) { checkStreaming(t, f) })
	t.Run("LoadReleasedAfterClientCancelsMidStream", func(t *testing.T) { checkCancelRelease(t, f) })
}
