package extproc

import (
	"math/rand/v2"
	"sync"
)

// randSources hands each request a *rand.Rand of its own for the slow-start
// draw and the picker's softmax draw. A *rand.Rand is not safe for
// concurrent use, and the one router-wide source this replaces (issue 18)
// cost every request two trips through the router's mutex; pooled, a
// source costs no allocation per request either. Each new source is seeded
// from math/rand/v2's concurrency-safe runtime generator. The zero value is
// ready.
type randSources struct{ pool sync.Pool }

func (s *randSources) get() *rand.Rand {
	if r, ok := s.pool.Get().(*rand.Rand); ok {
		return r
	}
	return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
}

// put returns r for another request; the caller must not use it after.
func (s *randSources) put(r *rand.Rand) { s.pool.Put(r) }
