package indexconfig

import (
	"strings"
	"testing"
)

// The section defaults and validates on its own, without config; key paths
// in errors follow the path given (config passes "index"; config's tests
// check the whole document's messages).
func TestDefaultsValidate(t *testing.T) {
	var idx Index
	idx.ApplyDefaults()
	if err := idx.Validate("index"); err != nil {
		t.Fatalf("index defaults: %v", err)
	}
	if idx.Backend != DefaultBackend || idx.Memory.MaxEntries != DefaultMemoryMaxEntries || idx.Redis.Prefix != DefaultRedisPrefix {
		t.Fatalf("defaults: %+v", idx)
	}
}

func TestValidateNamesTheGivenPath(t *testing.T) {
	idx := Index{Backend: "redis"}
	idx.ApplyDefaults()
	if err := idx.Validate("kv"); err == nil || !strings.HasPrefix(err.Error(), "kv.redis.addrs: ") {
		t.Errorf("redis without addrs: %v", err)
	}
	idx = Index{Backend: "etcd"}
	if err := idx.Validate("kv"); err == nil || err.Error() != `kv.backend: "etcd" is not one of memory, redis` {
		t.Errorf("unknown backend: %v", err)
	}
}
