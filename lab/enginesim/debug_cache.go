package enginesim

import (
	"encoding/json"
	"net/http"
	"slices"
)

// debugCachePath lists the sequence hashes (Dynamo identities) of the
// blocks in the simulated GPU prefix cache: what an index fed by this
// engine's events must hold for it, no more and no less. A test hook (real
// engines have no such endpoint); it reads the cache under the engine lock.
const debugCachePath = "/debug/kv-cache"

// DebugCache is the body of GET /debug/kv-cache.
type DebugCache struct {
	Blocks []uint64 `json:"blocks"` // sorted
}

func (s *Server) handleDebugCache(w http.ResponseWriter, _ *http.Request) {
	s.clock.mu.Lock()
	out := DebugCache{Blocks: make([]uint64, 0, len(s.clock.eng.pool.byHash))}
	for h := range s.clock.eng.pool.byHash {
		out.Blocks = append(out.Blocks, h)
	}
	s.clock.mu.Unlock()
	slices.Sort(out.Blocks)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
