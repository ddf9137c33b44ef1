package extprocconfig

import (
	"fmt"
	"time"

	"github.com/kvgate/kvgate/internal/yamlconf"
)

// SharedLoad shares in-flight load accounting between extproc replicas
// through the Redis index backend: each replica publishes its per-worker
// in-flight requests and queued prefill tokens every Interval and reads the
// other replicas' latest snapshots in the same background loop, so N
// replicas behind one Envoy do not all pick the same "best" worker
// (Dynamo #589). Nothing is added to the request path. With the memory
// backend there is nothing to share through and the section is ignored.
type SharedLoad struct {
	Disabled bool `yaml:"disabled"`
	// Interval is the publish and read period: the bound on how stale
	// another replica's load can be (plus one Redis round trip).
	Interval yamlconf.Duration `yaml:"interval"`
	// TTL is how long a replica's snapshot outlives its last publish: a
	// replica that died stops counting after it (default 20 × interval,
	// at least 1s).
	TTL yamlconf.Duration `yaml:"ttl"`
	// ReplicaID names this replica's key; empty = hostname, pid and a
	// random suffix (unique across restarts, so a restarted replica never
	// adopts its predecessor's stale snapshot).
	ReplicaID string `yaml:"replica_id"`
}

// Bounds on the shared-load settings.
const (
	minSharedLoadInterval = 5 * time.Millisecond
	maxSharedLoadInterval = 10 * time.Second
	maxSharedLoadTTL      = time.Hour
	maxReplicaIDBytes     = 128
)

func (x *SharedLoad) applyDefaults() {
	if x.Interval == 0 {
		// 50 ms: llm-d scrapes engine metrics every 50 ms for the same
		// reason; one small SET and one HGETALL plus a GET per peer.
		x.Interval = yamlconf.Duration(50 * time.Millisecond)
	}
	if x.TTL == 0 {
		x.TTL = yamlconf.Duration(max(time.Second, 20*x.Interval.D()))
	}
}

// validate reports the first invalid value; path is the section's key path.
func (x *SharedLoad) validate(path string) error {
	switch {
	case x.Interval.D() < minSharedLoadInterval || x.Interval.D() > maxSharedLoadInterval:
		return fmt.Errorf("%s.interval: %v outside [%v, %v]", path, x.Interval.D(), minSharedLoadInterval, maxSharedLoadInterval)
	case x.TTL.D() < 2*x.Interval.D() || x.TTL.D() > maxSharedLoadTTL:
		return fmt.Errorf("%s.ttl: %v must be at least twice the interval (%v) and at most %v", path, x.TTL.D(), x.Interval.D(), maxSharedLoadTTL)
	case len(x.ReplicaID) > maxReplicaIDBytes:
		return fmt.Errorf("%s.replica_id: %d bytes, more than %d", path, len(x.ReplicaID), maxReplicaIDBytes)
	}
	for i := 0; i < len(x.ReplicaID); i++ {
		c := x.ReplicaID[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			// Braces would form a Redis Cluster hash tag; spaces and
			// control bytes have no place in a key name.
			return fmt.Errorf("%s.replica_id: %q: byte %d (%q) is not a letter, digit, '-', '_', '.' or ':'", path, x.ReplicaID, i, c)
		}
	}
	return nil
}
