package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStandaloneServesAndCloseCleansUp(t *testing.T) {
	ctx := context.Background()
	s, err := StartStandalone(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() == "127.0.0.1:6379" {
		t.Fatalf("standalone server took the shared port %s", s.Addr())
	}
	if err := s.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c := s.NewClient()
	defer c.Close()
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("second client GET k = %q, %v; want v", got, err)
	}
	// Persistence is off so tests never write dump files behind them.
	cfg, err := c.ConfigGet(ctx, "save").Result()
	if err != nil || cfg["save"] != "" {
		t.Fatalf("CONFIG GET save = %v, %v; want empty", cfg, err)
	}
	dir := s.proc.root
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp dir %s still there after Close: %v", dir, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err == nil {
		t.Fatal("server still answers PING after Close")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestMissingRedisServerIsAnError(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := StartStandalone(context.Background(), Options{})
	if err == nil || !strings.Contains(err.Error(), "redis-server not found") {
		t.Fatalf("StartStandalone without redis-server: err = %v; want a not-found error", err)
	}
	_, err = StartCluster(context.Background(), ClusterOptions{Masters: 3})
	if err == nil || !strings.Contains(err.Error(), "redis-server not found") {
		t.Fatalf("StartCluster without redis-server: err = %v; want a not-found error", err)
	}
}

func TestClusterOptionsValidated(t *testing.T) {
	for _, o := range []ClusterOptions{{Masters: 0}, {Masters: -1}, {Masters: 65}, {Masters: 3, ReplicasPerMaster: -1}, {Masters: 3, ReplicasPerMaster: 5}} {
		if _, err := StartCluster(context.Background(), o); err == nil {
			t.Errorf("StartCluster(%+v): no error", o)
		}
	}
}

func TestSlotRangesCoverKeyspace(t *testing.T) {
	for of := 1; of <= 7; of++ {
		next := 0
		for i := 0; i < of; i++ {
			lo, hi := slotRange(i, of)
			if lo != next || hi < lo {
				t.Fatalf("slotRange(%d, %d) = %d..%d; want start %d", i, of, lo, hi, next)
			}
			next = hi + 1
		}
		if next != 16384 {
			t.Fatalf("%d ranges end at %d; want 16384", of, next)
		}
	}
}

// keysPerMaster writes n keys through the cluster client and counts, per
// master, how many it holds.
func keysPerMaster(t *testing.T, c *Cluster, n int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	cl := c.Client().(*redis.ClusterClient)
	for i := 0; i < n; i++ {
		if err := cl.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key:%d: %v", i, err)
		}
	}
	counts := map[string]int64{}
	var total atomic.Int64
	var mu = make(chan struct{}, 1)
	err := cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		mu <- struct{}{}
		counts[m.Options().Addr] = n
		<-mu
		total.Add(n)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total.Load() != int64(n) {
		t.Fatalf("masters hold %d keys; wrote %d", total.Load(), n)
	}
	return counts
}

func TestClusterSpreadsKeysOverMasters(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Masters: 3})
	if len(c.Addrs()) != 3 {
		t.Fatalf("%d nodes; want 3", len(c.Addrs()))
	}
	counts := keysPerMaster(t, c, 300)
	if len(counts) != 3 {
		t.Fatalf("keys on %d masters (%v); want 3", len(counts), counts)
	}
	for addr, n := range counts {
		if n == 0 {
			t.Errorf("master %s holds no keys", addr)
		}
	}
}

func TestClusterFailsOverWhenMasterKilled(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Masters: 3, ReplicasPerMaster: 1})
	if len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes; want 6", len(c.Addrs()))
	}
	ctx := context.Background()
	cl := c.Client()
	// A key in master 0's slot range, found by asking the server for slots
	// rather than trusting a precomputed constant.
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("failover:%d", i)
		slot, err := cl.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := slotRange(0, 3); int(slot) >= lo && int(slot) <= hi {
			key = k
		}
	}
	if err := cl.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT for the replica to have the write, so failover cannot lose it.
	admin := redis.NewClient(clientOptions(c.Addrs()[0]))
	if n, err := admin.Wait(ctx, 1, 5000).Result(); err != nil || n < 1 {
		admin.Close()
		t.Fatalf("WAIT 1 replica: %d, %v", n, err)
	}
	admin.Close()
	if err := c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitOK(wctx); err != nil {
		t.Fatal(err)
	}
	var got string
	err := poll(wctx, "the failed-over key to be readable", func() error {
		var err error
		got, err = cl.Get(wctx, key).Result()
		return err
	})
	if err != nil || got != "before" {
		t.Fatalf("GET %s after failover = %q, %v; want before", key, got, err)
	}
	if err := c.KillNode(99); err == nil {
		t.Fatal("KillNode(99) on a 6-node cluster: no error")
	}
}

// Restart brings the server back on the same address, empty.
func TestStandaloneRestartComesBackEmpty(t *testing.T) {
	s := Standalone(t)
	ctx := context.Background()
	if err := s.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Fatalf("restarted on %s, was %s", s.Addr(), addr)
	}
	n, err := s.Client().Exists(ctx, "k").Result()
	if err != nil || n != 0 {
		t.Fatalf("after restart: exists %d, err %v; want an empty server", n, err)
	}
}
