package indexer

import "github.com/redis/go-redis/v9"

// RedisClient is the client a Redis-backed index opened by OpenIndex uses,
// so that other per-process state kept in the same Redis (the extproc
// replicas' shared load, extproc/sharedload.go) rides on the same
// connection settings (addresses, Cluster mode, AUTH, TLS). It stays owned
// by the index: closing the index closes it.
func (o *ownedClient) RedisClient() redis.UniversalClient { return o.client }
