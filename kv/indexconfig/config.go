// Package indexconfig is the `index:` section of kvgate's configuration
// file: which fleet KV index backend every process opens (memory or Redis),
// its defaults (declared once, here) and its validation.
//
// It is a leaf of its own (standard library, yamlconf, secretfiles,
// confaddr) because every process parses the file and opens an index:
// kv/kvindex takes its defaults from here, config composes it, and the
// indexer, the extproc and the kvagent each read it (issue 18, issue 28).
package indexconfig

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Index selects and tunes the fleet KV index backend.
type Index struct {
	// Backend is "memory" (default, embedded) or "redis".
	Backend string      `yaml:"backend"`
	Memory  MemoryIndex `yaml:"memory"`
	Redis   RedisIndex  `yaml:"redis"`
}

// MemoryIndex tunes the embedded index.
type MemoryIndex struct {
	// MaxEntries bounds (block, worker, tier) entries; least recently used
	// blocks are evicted beyond it.
	MaxEntries int64 `yaml:"max_entries"`
	Shards     int   `yaml:"shards"`
}

// RedisIndex points at a standalone Redis or a Redis Cluster.
type RedisIndex struct {
	// Addrs: one address = standalone unless Cluster is set; several = Cluster seeds.
	Addrs   []string `yaml:"addrs"`
	Cluster bool     `yaml:"cluster"`
	// PasswordEnv names the environment variable holding the password, so
	// that secrets stay out of the file.
	PasswordEnv string `yaml:"password_env"`
	// PasswordFile is a file holding the password (a mounted Secret),
	// re-read for every new connection so a rotated password applies
	// without a restart. At most one of password_env, password_file.
	PasswordFile string `yaml:"password_file"`
	// Username is the Redis 6+ ACL user (AUTH username password); empty
	// authenticates as the default user.
	Username string `yaml:"username"`
	// TLS encrypts the connections to Redis (and Cluster nodes).
	TLS       secretfiles.ClientTLS `yaml:"tls"`
	DB        int                   `yaml:"db"`
	Prefix    string                `yaml:"prefix"`
	BlockTTL  yamlconf.Duration     `yaml:"block_ttl"`
	WorkerTTL yamlconf.Duration     `yaml:"worker_ttl"`
}

// Defaults for Index.
const (
	DefaultBackend          = "memory"
	DefaultMemoryMaxEntries = 1 << 24
	DefaultRedisPrefix      = "kvgate:"
	DefaultRedisBlockTTL    = time.Hour
	DefaultRedisWorkerTTL   = 30 * time.Second
)

// ApplyDefaults fills every unset key of the index: section.
func (x *Index) ApplyDefaults() {
	if x.Backend == "" {
		x.Backend = DefaultBackend
	}
	if x.Memory.MaxEntries == 0 {
		x.Memory.MaxEntries = DefaultMemoryMaxEntries
	}
	if x.Redis.Prefix == "" {
		x.Redis.Prefix = DefaultRedisPrefix
	}
	if x.Redis.BlockTTL == 0 {
		x.Redis.BlockTTL = yamlconf.Duration(DefaultRedisBlockTTL)
	}
	if x.Redis.WorkerTTL == 0 {
		x.Redis.WorkerTTL = yamlconf.Duration(DefaultRedisWorkerTTL)
	}
}

// Validate reports the first invalid value of the index: section, naming
// its key path (path is the section's, "index" in the file). A Redis
// password file or variable is read once here, so that a missing one
// stops the process at start.
func (x *Index) Validate(path string) error {
	switch x.Backend {
	case "memory":
		if x.Memory.MaxEntries < 0 {
			return errors.New(path + ".memory.max_entries: must be positive")
		}
		if x.Memory.Shards < 0 || x.Memory.Shards > 4096 {
			return errors.New(path + ".memory.shards: must be in 0..4096 (0 = default)")
		}
	case "redis":
		r := x.Redis
		rp := path + ".redis"
		if len(r.Addrs) == 0 {
			return errors.New(rp + ".addrs: at least one host:port is required with backend redis")
		}
		for i, a := range r.Addrs {
			if err := confaddr.CheckHostPort(a); err != nil {
				return fmt.Errorf("%s.addrs[%d]: %w", rp, i, err)
			}
		}
		if r.WorkerTTL.D() < time.Second {
			return errors.New(rp + ".worker_ttl: must be at least 1s")
		}
		if r.PasswordEnv != "" {
			if _, ok := os.LookupEnv(r.PasswordEnv); !ok {
				return fmt.Errorf("%s.password_env: environment variable %s is not set", rp, r.PasswordEnv)
			}
		}
		if err := r.validateAuth(rp); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s.backend: %q is not one of memory, redis", path, x.Backend)
	}
	return nil
}
