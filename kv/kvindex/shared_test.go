package kvindex

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// What each backend declares beyond Index: the processes decide by these
// (extproc's shared load, extprocd's own indexer, the indexer's resync on
// a wipe), never by the backend's name.
func TestBackendsDeclareCapabilities(t *testing.T) {
	var mem Index = NewMemory(MemoryConfig{})
	if _, ok := mem.(Shared); ok {
		t.Error("memory index declares Shared: its data lives in its process")
	}
	if _, ok := mem.(Generationer); ok {
		t.Error("memory index declares Generationer: nothing outside kvgate can wipe it")
	}
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			client := tg.client()
			prefix := uniquePrefix(t)
			var idx Index = newTestRedis(t, client, RedisConfig{Prefix: prefix})
			sh, ok := idx.(Shared)
			if !ok {
				t.Fatal("redis index does not declare Shared")
			}
			gotClient, gotPrefix := sh.LoadStore()
			if gotClient != client || gotPrefix != prefix {
				t.Fatalf("LoadStore = (%p, %q), want the index's client %p and prefix %q", gotClient, gotPrefix, client, prefix)
			}
			if _, ok := idx.(Generationer); !ok {
				t.Fatal("redis index does not declare Generationer")
			}
		})
	}
}

// With OwnClient the index closes its client on Close (indexer.OpenIndex
// hands it over); without, the client outlives the index.
func TestRedisClosesOnlyAnOwnedClient(t *testing.T) {
	startRedis(t)
	for _, own := range []bool{false, true} {
		client := redisStandalone.NewClient()
		r, err := NewRedis(tctx, RedisConfig{Client: client, OwnClient: own, Prefix: uniquePrefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatalf("own=%v: Close: %v", own, err)
		}
		err = client.Ping(tctx).Err()
		if own && !errors.Is(err, redis.ErrClosed) {
			t.Errorf("owned client after Close: ping err %v, want %v", err, redis.ErrClosed)
		}
		if !own {
			if err != nil {
				t.Errorf("client not owned, after Close: ping err %v, want it still open", err)
			}
			client.Close()
		}
	}
}
