package indexer

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/kv/indexconfig"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// OpenIndex builds the configured index backend. For Redis the index owns
// the client created here: closing the index closes the client too. This
// switch is the one place a backend's name is read; what a backend can do
// beyond kvindex.Index it declares itself (kvindex.Shared,
// kvindex.Generationer).
func OpenIndex(ctx context.Context, c indexconfig.Index) (kvindex.Index, error) {
	switch c.Backend {
	case "memory":
		return kvindex.NewMemory(kvindex.MemoryConfig{Shards: c.Memory.Shards, MaxEntries: c.Memory.MaxEntries}), nil
	case "redis":
		opts, err := redisOptions(c.Redis)
		if err != nil {
			return nil, err
		}
		client := redis.NewUniversalClient(opts)
		if err := client.Ping(ctx).Err(); err != nil {
			client.Close()
			return nil, fmt.Errorf("redis index: ping %v: %w", c.Redis.Addrs, err)
		}
		idx, err := kvindex.NewRedis(ctx, kvindex.RedisConfig{
			Client:    client,
			OwnClient: true,
			Prefix:    c.Redis.Prefix,
			BlockTTL:  c.Redis.BlockTTL.D(),
			WorkerTTL: c.Redis.WorkerTTL.D(),
		})
		if err != nil {
			client.Close()
			return nil, err
		}
		return idx, nil
	}
	return nil, fmt.Errorf("index backend %q: not one of memory, redis", c.Backend)
}

// redisOptions turns kvindex.redis into client options: TLS, and the ACL
// user and password fetched for every new connection (a rotated password
// file applies to the next connection; the password never enters a log
// line or an error).
func redisOptions(r indexconfig.RedisIndex) (*redis.UniversalOptions, error) {
	opts := &redis.UniversalOptions{Addrs: r.Addrs, DB: r.DB, IsClusterMode: r.Cluster}
	tlsCfg, err := r.TLS.Load()
	if err != nil {
		return nil, fmt.Errorf("redis index: kvindex.redis.%w", err)
	}
	opts.TLSConfig = tlsCfg
	if r.PasswordFile != "" || r.PasswordEnv != "" || r.Username != "" {
		user := r.Username
		opts.CredentialsProviderContext = func(context.Context) (string, string, error) {
			p, err := secretfiles.Password(r.PasswordFile, r.PasswordEnv)
			if err != nil {
				return "", "", fmt.Errorf("redis index: password: %w", err)
			}
			return user, p, nil
		}
	}
	return opts, nil
}
