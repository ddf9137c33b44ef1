package server

import (
	"sync"

	"github.com/kvgate/kvgate/extproc/envoyaddr"
)

// maxEndpointSpellings bounds the memo below: past it the memo starts
// over. A fleet is a few hundred workers; a decider that names more
// distinct endpoints than this still gets correct answers, at the parse's
// cost.
const maxEndpointSpellings = 4096

// endpointSpellings memoises envoyaddr.Canonical for the endpoints the
// decider names. Every decision names 1 + its fallbacks (+ a prefiller),
// all drawn from the same fleet, and each was parsed twice per stream
// (validateDecision, then canonicalize) and formatted again, allocating
// per stream for an answer that never changes (issue 27 item 3). Only
// valid spellings are kept: an invalid one is parsed, and refused, every
// time.
type endpointSpellings struct {
	mu sync.RWMutex
	m  map[string]string // decider's spelling → Envoy's
}

// canonical is envoyaddr.Canonical(ep), from the memo when ep was seen.
func (e *endpointSpellings) canonical(ep string) (string, error) {
	e.mu.RLock()
	c, ok := e.m[ep]
	e.mu.RUnlock()
	if ok {
		return c, nil
	}
	c, err := envoyaddr.Canonical(ep)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	if e.m == nil || len(e.m) >= maxEndpointSpellings {
		e.m = make(map[string]string)
	}
	e.m[ep] = c
	e.mu.Unlock()
	return c, nil
}
