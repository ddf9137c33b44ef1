package server

import "sync/atomic"

// bufferBudget is the memory all streams together may hold in request
// headers and bodies until they are routed. Envoy streams a
// FULL_DUPLEX_STREAMED body as fast as the client sends it and never waits
// for kvgate (ext_proc.cc handleDataFullDuplexStreamedMode), so without a
// shared bound a few large, slow requests hold gigabytes.
//
// A request's first SmallRequestBytes may use the whole budget; anything
// beyond may use only three quarters of it. Large bodies are refused
// first, and the last quarter keeps the ordinary small requests flowing.
type bufferBudget struct {
	limit, largeLimit int64
	used              atomic.Int64
	large             atomic.Int64 // bytes reserved beyond each request's small allowance
}

func newBufferBudget(limit int64) *bufferBudget {
	return &bufferBudget{limit: limit, largeLimit: limit / 4 * 3}
}

// reservation is one stream's share; the zero value holds nothing.
type reservation struct {
	held, heldLarge int64
}

// grow reserves n more bytes for r; false (nothing reserved) if the budget
// cannot take them.
func (b *bufferBudget) grow(r *reservation, n int64) bool {
	if n <= 0 {
		return true
	}
	large := max(0, r.held+n-SmallRequestBytes) - r.heldLarge
	if large > 0 {
		if b.large.Add(large) > b.largeLimit {
			b.large.Add(-large)
			return false
		}
	}
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		if large > 0 {
			b.large.Add(-large)
		}
		return false
	}
	r.held += n
	if large > 0 {
		r.heldLarge += large
	}
	return true
}

// release returns everything r holds.
func (b *bufferBudget) release(r *reservation) {
	if r.held != 0 {
		b.used.Add(-r.held)
	}
	if r.heldLarge != 0 {
		b.large.Add(-r.heldLarge)
	}
	*r = reservation{}
}

// inUse is the bytes reserved now.
func (b *bufferBudget) inUse() int64 { return b.used.Load() }
