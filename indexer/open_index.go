package indexer

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/indexer/index"
)

// OpenIndex builds the configured index backend. For Redis it owns the
// client it creates: closing the returned index closes the client too.
func OpenIndex(ctx context.Context, c config.Index) (index.Index, error) {
	switch c.Backend {
	case "memory":
		return index.NewMemory(index.MemoryConfig{Shards: c.Memory.Shards, MaxEntries: c.Memory.MaxEntries}), nil
	case "redis":
		opts := &redis.UniversalOptions{Addrs: c.Redis.Addrs, DB: c.Redis.DB, IsClusterMode: c.Redis.Cluster}
		if c.Redis.PasswordEnv != "" {
			opts.Password = os.Getenv(c.Redis.PasswordEnv)
		}
		client := redis.NewUniversalClient(opts)
		if err := client.Ping(ctx).Err(); err != nil {
			client.Close()
			return nil, fmt.Errorf("redis index: ping %v: %w", c.Redis.Addrs, err)
		}
		idx, err := index.NewRedis(ctx, index.RedisConfig{
			Client:    client,
			Prefix:    c.Redis.Prefix,
			BlockTTL:  c.Redis.BlockTTL.D(),
			WorkerTTL: c.Redis.WorkerTTL.D(),
		})
		if err != nil {
			client.Close()
			return nil, err
		}
		return &ownedClient{Index: idx, client: client}, nil
	}
	return nil, fmt.Errorf("index backend %q: not one of memory, redis", c.Backend)
}

// ownedClient closes the Redis client with the index that uses it.
type ownedClient struct {
	index.Index
	client redis.UniversalClient
}

func (o *ownedClient) Close() error {
	err := o.Index.Close()
	if cerr := o.client.Close(); err == nil {
		err = cerr
	}
	return err
}
