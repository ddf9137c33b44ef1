package indexerconfig

import (
	"strings"
	"testing"
)

// The sections default and validate on their own, without config; key
// paths in errors follow the path given (config passes "index" and
// "indexer"; config's tests check the whole document's messages).
func TestDefaultsValidate(t *testing.T) {
	var idx Index
	idx.ApplyDefaults()
	var x Config
	x.ApplyDefaults()
	if err := idx.Validate("index"); err != nil {
		t.Fatalf("index defaults: %v", err)
	}
	if err := x.Validate("indexer"); err != nil {
		t.Fatalf("indexer defaults: %v", err)
	}
	if idx.Backend != DefaultBackend || idx.Memory.MaxEntries != DefaultMemoryMaxEntries || idx.Redis.Prefix != DefaultRedisPrefix ||
		x.Listen != DefaultListen || x.EngineDeadAfter.D() != DefaultEngineDeadAfter {
		t.Fatalf("defaults: %+v %+v", idx, x)
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
	x := Config{EventsBind: "tcp://0.0.0.0:5557"}
	x.ApplyDefaults()
	if err := x.Validate("ix"); err == nil || !strings.Contains(err.Error(), "ix.events_bind: \"tcp://0.0.0.0:5557\" listens beyond loopback; list the engines' networks in ix.events_bind_allow") {
		t.Errorf("events_bind beyond loopback: %v", err)
	}
	x.EventsBindAllow = []string{"office"}
	if err := x.Validate("ix"); err == nil || !strings.HasPrefix(err.Error(), "ix.events_bind_allow[0]: ") {
		t.Errorf("bad allow entry: %v", err)
	}
}
