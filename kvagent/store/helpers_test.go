package store

import (
	"encoding/binary"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvgate/kvgate/kv/kvevents"
)

// blockData derives a block's bytes from its key, so any reader can check
// what it got without remembering what was written.
func blockData(k Key, n int) []byte {
	b := make([]byte, n)
	x := xxh3.HashString(k.Namespace) ^ k.Hash
	for i := 0; i+8 <= n; i += 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(b[i:], z^z>>31)
	}
	return b
}

// blockMeta derives a block's meta from its key and parent.
func blockMeta(k Key, parent uint64, hasParent bool) Meta {
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(k.Hash>>(i%8)) + uint32(i)
	}
	return Meta{Parent: parent, HasParent: hasParent, TokenIDs: toks, LoRAName: "lora-" + k.Namespace}
}

// changeLog records OnChange calls and mirrors residency per tier.
type changeLog struct {
	mu       sync.Mutex
	changes  []Change
	resident map[Tier]map[Key]Meta
}

func newChangeLog() *changeLog {
	return &changeLog{resident: map[Tier]map[Key]Meta{TierHost: {}, TierDisk: {}}}
}

func (l *changeLog) record(c Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, c)
	for i, h := range c.Hashes {
		k := Key{Namespace: c.Namespace, Hash: h}
		switch c.Kind {
		case kvevents.BlockStored:
			l.resident[c.Tier][k] = c.Metas[i]
		case kvevents.BlockRemoved:
			delete(l.resident[c.Tier], k)
		}
	}
}

func (l *changeLog) has(t Tier, k Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.resident[t][k]
	return ok
}

func (l *changeLog) count(t Tier) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.resident[t])
}

func testConfig(t testing.TB, dir string) Config {
	return Config{
		BlockBytes: 8192,
		HostBlocks: 8,
		ShmPath:    filepath.Join(t.TempDir(), "arena"),
		DiskBlocks: 16,
		DiskDir:    dir,
		Logger:     slog.New(slog.DiscardHandler),
	}
}

func openTest(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// drainDisk waits until the disk queue is empty, the writer idle and
// every residency change delivered.
func (s *Store) drainDisk() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) > 0 || s.delivering || len(s.outbox) > 0 {
		s.settled.Wait()
	}
}

func checksumOf(b []byte) uint64 { return blockSum(b) }
