// Package loadview is kvgate's own per-worker load accounting: requests in
// flight, prompt tokens routed but not yet prefilled, and KV blocks held.
// The ext_proc server opens a Ticket when it routes a request and closes it
// when the response stream ends, however it ends; Sweep is the backstop for
// tickets nobody closed. Recent (recent.go) is the approximate KV view for
// engines that publish no KV events; Throughput (throughput.go) each
// worker's prefill-rate estimate.
//
// Time is always passed in; the package reads no clock and starts no
// goroutine. All types are safe for concurrent use.
package loadview

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// Outcome is how a request ended.
type Outcome uint8

const (
	OutcomeCompleted     Outcome = iota // stream ended normally
	OutcomeCanceled                     // client or proxy went away
	OutcomeUpstreamError                // the engine failed or the proxy reported an error
	OutcomeTimeout                      // a deadline expired
	OutcomeSwept                        // force-finished by Sweep (a leak)
	NumOutcomes
)

func (o Outcome) String() string {
	switch o {
	case OutcomeCompleted:
		return "completed"
	case OutcomeCanceled:
		return "canceled"
	case OutcomeUpstreamError:
		return "upstream_error"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeSwept:
		return "swept"
	}
	return "unknown"
}

// maxTicketAmount bounds one ticket's tokens or blocks, so that sums over
// millions of tickets cannot overflow int64.
const maxTicketAmount = 1 << 40

// View tracks per-worker load. The zero value is not usable; call New.
type View struct {
	mu      sync.Mutex
	workers map[kvfleet.WorkerID]*workerLoad
	open    ticketList // every unfinished ticket, oldest first

	begun       atomic.Uint64
	prefillDone atomic.Uint64
	finished    [NumOutcomes]atomic.Uint64
	openCount   atomic.Int64
	clamped     atomic.Uint64
}

type workerLoad struct {
	inflight      int
	prefillTokens int64
	decodeBlocks  int64
}

// New returns an empty View.
func New() *View {
	return &View{workers: make(map[kvfleet.WorkerID]*workerLoad)}
}

type ticketState uint8

const (
	stateOpen      ticketState = iota // routed, prefill pending
	statePrefilled                    // first token seen
	stateFinished
)

// Ticket is one routed request's claim on a worker's load. Its methods are
// idempotent and safe to call from any goroutine; a nil Ticket is a no-op.
type Ticket struct {
	v             *View
	worker        kvfleet.WorkerID
	load          *workerLoad // valid while the ticket is unfinished
	prefillTokens int64
	decodeBlocks  int64
	began         time.Time
	state         ticketState // guarded by v.mu
	prev, next    *Ticket     // v.open, guarded by v.mu
}

// Worker is the worker the ticket was opened on.
func (t *Ticket) Worker() kvfleet.WorkerID { return t.worker }

func (v *View) clamp(n int64) int64 {
	switch {
	case n < 0:
		v.clamped.Add(1)
		return 0
	case n > maxTicketAmount:
		v.clamped.Add(1)
		return maxTicketAmount
	}
	return n
}

// Begin records that a request was routed to worker: prefillTokens prompt
// tokens it must still compute and decodeBlocks KV blocks it will hold.
// Out-of-range amounts are clamped to [0, 2^40] and counted in
// Stats.ClampedInputs rather than refused: the request is routed anyway and
// must be accounted for.
func (v *View) Begin(worker kvfleet.WorkerID, prefillTokens, decodeBlocks int64, now time.Time) *Ticket {
	t := &Ticket{
		v:             v,
		worker:        worker,
		prefillTokens: v.clamp(prefillTokens),
		decodeBlocks:  v.clamp(decodeBlocks),
		began:         now,
	}
	v.mu.Lock()
	wl := v.workers[worker]
	if wl == nil {
		wl = &workerLoad{}
		v.workers[worker] = wl
	}
	t.load = wl
	wl.inflight++
	wl.prefillTokens += t.prefillTokens
	wl.decodeBlocks += t.decodeBlocks
	v.open.pushBack(t)
	v.begun.Add(1)
	v.openCount.Add(1)
	v.mu.Unlock()
	return t
}

// PrefillDone records the first response token: the prompt is computed, so
// its tokens leave the worker's prefill queue. The KV blocks stay held until
// Finish, as in Dynamo's active-sequence tracking (lib/kv-router/src/
// sequences: mark_prefill_completed releases prefill tokens, free releases
// blocks). A no-op after the first call or after Finish.
func (t *Ticket) PrefillDone() {
	if t == nil {
		return
	}
	v := t.v
	v.mu.Lock()
	if t.state != stateOpen {
		v.mu.Unlock()
		return
	}
	t.load.prefillTokens -= t.prefillTokens
	t.state = statePrefilled
	v.prefillDone.Add(1)
	v.mu.Unlock()
}

// Finish releases everything the ticket still holds and records how the
// request ended. Only the first call counts; later calls are no-ops.
// An outcome outside the defined ones is counted as OutcomeUpstreamError.
func (t *Ticket) Finish(o Outcome) {
	if t == nil {
		return
	}
	if o >= NumOutcomes {
		o = OutcomeUpstreamError
	}
	v := t.v
	v.mu.Lock()
	if v.finishLocked(t) {
		// Counted under the lock, so that once any Finish has returned the
		// counters agree with the loads.
		v.finished[o].Add(1)
		v.openCount.Add(-1)
	}
	v.mu.Unlock()
}

// finishLocked releases t's load; false if t was already finished.
func (v *View) finishLocked(t *Ticket) bool {
	if t.state == stateFinished {
		return false
	}
	wl := t.load
	if t.state == stateOpen {
		wl.prefillTokens -= t.prefillTokens
	}
	wl.decodeBlocks -= t.decodeBlocks
	wl.inflight--
	if wl.inflight == 0 {
		// Forget idle workers so that departed ones do not accumulate.
		delete(v.workers, t.worker)
	}
	t.state = stateFinished
	t.load = nil
	v.open.remove(t)
	return true
}

// Sweep force-finishes every ticket that began more than maxAge before now
// (a stream whose end the server never saw) and returns how many.
func (v *View) Sweep(now time.Time, maxAge time.Duration) int {
	v.mu.Lock()
	n := 0
	for t := v.open.head; t != nil; {
		next := t.next
		if now.Sub(t.began) > maxAge && v.finishLocked(t) {
			n++
		}
		t = next
	}
	if n > 0 {
		v.finished[OutcomeSwept].Add(uint64(n))
		v.openCount.Add(-int64(n))
	}
	v.mu.Unlock()
	return n
}

// Snapshot is worker's current load; zero for a worker with nothing open.
func (v *View) Snapshot(worker kvfleet.WorkerID) picker.Load {
	v.mu.Lock()
	defer v.mu.Unlock()
	if wl := v.workers[worker]; wl != nil {
		return wl.load()
	}
	return picker.Load{}
}

// SnapshotAll returns the load of every worker with an open ticket.
func (v *View) SnapshotAll() map[kvfleet.WorkerID]picker.Load {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[kvfleet.WorkerID]picker.Load, len(v.workers))
	for w, wl := range v.workers {
		out[w] = wl.load()
	}
	return out
}

func (wl *workerLoad) load() picker.Load {
	return picker.Load{InflightRequests: wl.inflight, PrefillTokens: wl.prefillTokens, DecodeBlocks: wl.decodeBlocks}
}

// Begun is how many tickets were ever opened: the replica's routed count,
// which shared load publishes so peers can tell how much traffic it gets.
func (v *View) Begun() uint64 { return v.begun.Load() }

// Stats is a snapshot of the View's counters, for the lead to export.
type Stats struct {
	Begun         uint64              // tickets opened
	PrefillDone   uint64              // tickets that saw their first token
	Finished      [NumOutcomes]uint64 // tickets closed, by outcome (Swept included)
	Open          int64               // tickets open now
	ClampedInputs uint64              // Begin amounts outside [0, 2^40]
	Workers       int                 // workers with an open ticket
}

// Stats reads the counters.
func (v *View) Stats() Stats {
	s := Stats{
		Begun:         v.begun.Load(),
		PrefillDone:   v.prefillDone.Load(),
		Open:          v.openCount.Load(),
		ClampedInputs: v.clamped.Load(),
	}
	for i := range s.Finished {
		s.Finished[i] = v.finished[i].Load()
	}
	v.mu.Lock()
	s.Workers = len(v.workers)
	v.mu.Unlock()
	return s
}

// ticketList is an intrusive doubly linked list: O(1) insert and removal
// with no allocation beyond the Ticket itself.
type ticketList struct{ head, tail *Ticket }

func (l *ticketList) pushBack(t *Ticket) {
	t.prev, t.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = t
	} else {
		l.head = t
	}
	l.tail = t
}

func (l *ticketList) remove(t *Ticket) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		l.tail = t.prev
	}
	t.prev, t.next = nil, nil
}
