//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/lossyproxy"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

// The chaos faults that take longer or need more processes (`make e2e`).

// Chaos (d), strict: after the failover the index must also hold every
// block the engines stored before it.
func TestChaosRedisMasterKilledIndexComplete(t *testing.T) { chaosRedisMasterKill(t, true) }

func indexedBlocks(t *testing.T, metricsAt string) float64 {
	t.Helper()
	wb, err := workerBlocks(metricsAt)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, v := range wb {
		sum += v
	}
	return sum
}

// Chaos (b): the `kvgate indexer` of a Redis index is SIGKILLed and
// restarted under load. The extprocs read Redis directly, so no request
// fails (routing degrades to load-only at worst, once the workers'
// registry entries expire); the restarted indexer replays the engines'
// buffers, and the index then equals the engines' caches.
func TestChaosIndexerKilled(t *testing.T) {
	rds := redistest.Standalone(t)
	cf := startChaosFleet(t, chaosOptions{engines: 3, redisAddrs: []string{rds.Addr()}, engineDeadAfter: 10 * time.Second, indexTimeout: 500 * time.Millisecond})
	load := startChaosLoad(t, cf, 71)
	load.waitOK(t, time.Time{}, 16, "warm-up requests succeed")
	beforeKill := indexedBlocks(t, cf.indexerAt)

	signaledAt := time.Now()
	cf.indexer.Kill()
	killedAt := time.Now()
	// Down longer than worker_ttl (2s): the workers leave the registry
	// and matches, so the restart has to re-establish them.
	time.Sleep(3 * time.Second)
	restartedAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if cf.indexer = cf.startIndexer(ctx); cf.indexer == nil {
		t.Fatal("indexer did not restart on its port")
	}
	readyAfter := time.Since(restartedAt)
	var backAfter time.Duration
	waitFor(t, "the restarted indexer holds at least what it held before the kill", 60*time.Second, func() error {
		if n := indexedBlocks(t, cf.indexerAt); n < beforeKill {
			return fmt.Errorf("kvgate_indexer_worker_blocks sums to %v, %v before the kill", n, beforeKill)
		}
		backAfter = time.Since(restartedAt)
		return nil
	})
	load.waitOK(t, time.Now(), 8, "requests after the restart succeed")
	load.finish()
	outs := load.outcomes()
	c := tally(outs, signaledAt, killedAt)
	for _, o := range outs {
		if o.err != nil {
			t.Errorf("request %s failed around the indexer restart: %v", o.start.Format(time.StampMilli), o.err)
		}
	}
	time.Sleep(cf.registryLag + time.Second)
	stale, missing := cf.compareIndexWithEngines(t, load.prefixes)
	for _, s := range stale {
		t.Errorf("stale index entry after the indexer restart: %s", s)
	}
	for _, m := range missing {
		t.Errorf("missing index entry after the indexer restart: %s", m)
	}
	checkPrefixAffinity(t, cf.fleet, cf.indexerAt, 72)
	cf.waitNoOpenTickets(t)
	t.Logf("indexer kill: down 3s; ready %.2fs after restart, all %v blocks back %.2fs after restart", readyAfter.Seconds(), beforeKill, backAfter.Seconds())
	logChaosRow(t, "indexer kill -9 (Redis backend), down 3 s, restart", c, "0 allowed",
		fmt.Sprintf("index complete %.1f s after restart", backAfter.Seconds()),
		fmt.Sprintf("stale: %d; missing: %d of %d (prefix, engine) pairs", len(stale), len(missing), len(load.prefixes)*len(cf.engines)))
}

// Chaos (c): one of two extproc replicas is SIGKILLed while requests run
// through it. Only requests in flight at the kill fail: envoy.yaml's
// ext_proc grpc_service.retry_policy opens a stream that the dead replica
// refuses, or ends without a reply, again on the other replica, and
// outlier detection ejects the dead one at its first refusal (the gateway
// plays both as Envoy does, lab/envoyharness/proxy.go Start). The
// restarted replica takes streams again.
func TestChaosExtprocReplicaKilled(t *testing.T) {
	cf := startChaosFleet(t, chaosOptions{engines: 3, replicas: 2, engineDeadAfter: 10 * time.Second, indexTimeout: 500 * time.Millisecond})
	load := startChaosLoad(t, cf, 81)
	load.waitOK(t, time.Time{}, 16, "warm-up requests succeed")
	victim := cf.admins[0]
	var openAtKill float64
	waitFor(t, "requests are open on the victim replica", 30*time.Second, func() error {
		m, err := scrape("http://" + victim + "/metrics")
		if err != nil {
			return err
		}
		if openAtKill = m["kvgate_extproc_open_tickets"]; openAtKill < 1 {
			return fmt.Errorf("kvgate_extproc_open_tickets = %v", openAtKill)
		}
		return nil
	})
	signaledAt := time.Now()
	cf.procs[0].Kill() // returns once the process has exited
	killedAt := time.Now()
	okAgain := load.waitOK(t, killedAt, 12, "requests succeed after the kill")

	restartedAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	p := procs.Start(t, "extproc0-restarted", kvgateBin, "extproc", "--config", cf.cfgPath, "--listen", cf.listens[0], "--admin", victim, "--drain", "2s")
	if err := p.WaitHTTP(ctx, "http://"+victim+"/readyz"); err != nil {
		t.Fatalf("restarted replica: %v", err)
	}
	cf.procs[0], cf.extproc = p, p
	var streamsAfter time.Duration
	waitFor(t, "the restarted replica takes streams again", 60*time.Second, func() error {
		m, err := scrape("http://" + victim + "/metrics")
		if err != nil {
			return err
		}
		if m["kvgate_extproc_requests_total"] < 1 {
			return fmt.Errorf("kvgate_extproc_requests_total = %v", m["kvgate_extproc_requests_total"])
		}
		streamsAfter = time.Since(restartedAt)
		return nil
	})
	load.finish()
	outs := load.outcomes()
	c := tally(outs, signaledAt, killedAt)
	// The claim, as the bound: failed ⊆ in flight at the kill.
	checkFailuresInFlightOn(t, outs, signaledAt, killedAt, 0, "")
	if c.failedAfterKill != 0 || c.failed > c.inFlightAtKill {
		t.Errorf("%d requests failed (%d started after the kill); %d were in flight at the kill", c.failed, c.failedAfterKill, c.inFlightAtKill)
	}
	for _, admin := range cf.admins {
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
	t.Logf("extproc replica kill: %v open on it at the kill; first OK request started %.2fs after; restarted replica took streams %.2fs after restart (gateway ejects a failed host for 5s)",
		openAtKill, okAgain.Sub(killedAt).Seconds(), streamsAfter.Seconds())
	logChaosRow(t, "extproc replica kill -9 (1 of 2) + restart", c, fmt.Sprintf("failed ⊆ in flight at the kill (%d started after it); %v open on the victim", c.failedAfterKill, openAtKill),
		fmt.Sprintf("%.2f s to success; restarted replica serving %.1f s after restart", okAgain.Sub(killedAt).Seconds(), streamsAfter.Seconds()), "n/a (index in each replica)")
}

// Chaos (e): a proxy between one engine's ZMQ PUB and the subscriber
// drops every 5th KV-event message and delays every 7th behind the next
// (after the first few, so the stream starts clean). The subscriber must
// detect the gaps, repair them from the engine's replay endpoint, and the
// index must then equal the engines' caches.
func TestChaosLossyEventStream(t *testing.T) {
	var proxy *lossyproxy.Proxy
	cf := startChaosFleet(t, chaosOptions{engines: 2, engineDeadAfter: 10 * time.Second, indexTimeout: 500 * time.Millisecond,
		eventsVia: func(i int, e *engine) string {
			if i != 0 {
				return e.events
			}
			p, err := lossyproxy.Start("127.0.0.1:0", strings.TrimPrefix(e.events, "tcp://"), func(n int) lossyproxy.Action {
				switch {
				case n < 3:
					return lossyproxy.Forward
				case n%5 == 0:
					return lossyproxy.Drop
				case n%7 == 0:
					return lossyproxy.Delay
				}
				return lossyproxy.Forward
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			proxy = p
			return "tcp://" + p.Addr()
		}})
	load := startChaosLoad(t, cf, 101)
	load.waitOK(t, time.Time{}, 150, "requests through a fleet with a lossy event stream")
	load.finish()
	// The last batches may have been lost with the engine then quiet: the
	// subscriber's tail poll (1s of silence) repairs those.
	time.Sleep(3 * time.Second)
	outs := load.outcomes()
	now := time.Now()
	c := tally(outs, now, now)
	for _, o := range outs {
		if o.err != nil {
			t.Errorf("request failed: %v", o.err)
		}
	}
	m, err := scrape("http://" + cf.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	gaps, repaired := m["kvgate_indexer_sequence_gaps_total"], m["kvgate_indexer_sequence_gaps_repaired_total"]
	restarts, replays := m["kvgate_indexer_publisher_restarts_total"], m["kvgate_indexer_replays_total"]
	if proxy.Dropped.Load() == 0 || proxy.Delayed.Load() == 0 {
		t.Fatalf("the proxy dropped %d and delayed %d messages: the test did not exercise loss", proxy.Dropped.Load(), proxy.Delayed.Load())
	}
	if gaps == 0 || repaired == 0 {
		t.Errorf("gaps detected %v, repaired %v; the proxy dropped %d messages", gaps, repaired, proxy.Dropped.Load())
	}
	// A late (reordered) message is not a new publisher: treating it as
	// one resets the worker's entries and rebuilds them from seq 0.
	if restarts != 0 {
		t.Errorf("kvgate_indexer_publisher_restarts_total = %v after %d delayed messages: a reordered message was taken for a publisher restart", restarts, proxy.Delayed.Load())
	}
	stale, missing := cf.compareIndexWithEngines(t, load.prefixes)
	for _, s := range stale {
		t.Errorf("stale index entry after loss and repair: %s", s)
	}
	for _, s := range missing {
		t.Errorf("missing index entry after loss and repair: %s", s)
	}
	t.Logf("lossy stream: proxy dropped %d, delayed %d messages; gaps %v, repaired %v, replays %v, publisher restarts %v",
		proxy.Dropped.Load(), proxy.Delayed.Load(), gaps, repaired, replays, restarts)
	logChaosRow(t, "KV-event messages dropped (1 in 5) and reordered (1 in 7) between engine and indexer", c, "0 allowed",
		fmt.Sprintf("%v gaps, %v repaired by replay; %v publisher restarts", gaps, repaired, restarts),
		fmt.Sprintf("stale: %d; missing: %d of %d (prefix, engine) pairs", len(stale), len(missing), len(load.prefixes)*len(cf.engines)))
}
