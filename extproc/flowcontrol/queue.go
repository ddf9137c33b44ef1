// Package flowcontrol is the waiting room between admission and the pick:
// when every worker of a pool is saturated, a request waits here instead of
// being refused, and leaves in order of priority band, then fairly across
// flows (tenants), then by deadline. It is pure: no clock, no goroutine, no
// lock — the caller (extproc's flow gate, and lab/replay's simulated
// router) owns time and concurrency and passes "now" in. The same code
// orders the live extproc's queue and the replay's, so what the replay
// measures is what the extproc does.
//
// The shape follows the Gateway API Inference Extension's flow controller
// (kubernetes-sigs/gateway-api-inference-extension at 0e431c53,
// pkg/epp/flowcontrol/registry/config.go): priority bands, higher priority
// first; a fairness policy choosing among the band's flows; an ordering
// policy inside a flow; byte bounds on what waits. kvgate fixes the
// policies instead of making them plugins: round robin across flows (GIE
// offers a round-robin fairness policy; its default, global strict, serves
// the flows by their head requests, so a tenant with many early requests
// keeps its turn) and earliest deadline first inside a flow (GIE's EDF
// ordering, pkg/epp/flowcontrol/framework/plugins/policies/intraflow/
// dispatch/edf), arrival breaking ties — except while the flow is backed
// up (PopAt: adaptive LIFO, its newest first).
//
// When a bound is full, an arrival may push out a waiting request
// (AddPushingOut, pushout.go): the heaviest flow's newest one, so that a
// noisy tenant is shed before a quiet one.
package flowcontrol

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Bounds limit what the queue holds, all bands together. A zero bound is
// unbounded.
type Bounds struct {
	MaxRequests int
	MaxBytes    int64
}

// Validate reports a negative bound.
func (b Bounds) Validate() error {
	if b.MaxRequests < 0 || b.MaxBytes < 0 {
		return fmt.Errorf("flowcontrol: bounds must be >= 0 (0 = unbounded), got %d requests, %d bytes", b.MaxRequests, b.MaxBytes)
	}
	return nil
}

// ErrFull is returned by Add when the item would cross a bound; Reason
// says which ("max_requests" or "max_bytes").
type ErrFull struct{ Reason string }

func (e *ErrFull) Error() string { return "flow-control queue full: " + e.Reason }

// Item is one waiting request. The caller fills the exported fields before
// Add and must not change them while the item is queued.
type Item struct {
	Priority int       // band: higher leaves first
	Flow     string    // tenant key; "" is one flow like any other
	Bytes    int64     // what the request holds while it waits (its body)
	Deadline time.Time // past it the request cannot start: Expired removes it
	// Arrived orders items of a flow with the same deadline.
	Arrived time.Time
	// Value is the caller's: the queue never reads it.
	Value any

	seq    uint64
	flow   *flow
	queued bool
}

// Queued reports whether the item is still waiting.
func (it *Item) Queued() bool { return it.queued }

// flow is one tenant's items in one band, earliest deadline first.
type flow struct {
	key   string
	band  *band
	items []*Item // sorted by (Deadline, seq)
}

// band is one priority level's flows, served round robin.
type band struct {
	priority int
	flows    map[string]*flow
	// ring is the round-robin order of flows with items; next indexes the
	// flow whose turn it is.
	ring  []*flow
	next  int
	count int
	bytes int64
}

// Queue holds waiting items. The zero value is not usable: call New.
type Queue struct {
	bounds Bounds
	bands  []*band // by priority, highest first
	count  int
	bytes  int64
	seq    uint64
	// weights is each flow key's waiting items, all bands together: how
	// heavy a tenant is when the queue must push one out.
	weights map[string]int
}

// New returns an empty queue with the given bounds.
func New(b Bounds) (*Queue, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &Queue{bounds: b, weights: map[string]int{}}, nil
}

// Len is the number of waiting items; Bytes their bytes.
func (q *Queue) Len() int       { return q.count }
func (q *Queue) Bytes() int64   { return q.bytes }
func (q *Queue) Bounds() Bounds { return q.bounds }

// BandLen is the number of items waiting at priority p.
func (q *Queue) BandLen(p int) int {
	if b := q.findBand(p); b != nil {
		return b.count
	}
	return 0
}

// Fits reports whether an item of n bytes would be accepted now, and if
// not, which bound refuses it.
func (q *Queue) Fits(n int64) (bool, string) { return q.bounds.fit(q.count, q.bytes, n) }

// fit is Fits for a queue holding count items of bytes in all (AddPushingOut
// asks it of the queue as it would be without the items it pushes out).
func (b Bounds) fit(count int, bytes, n int64) (bool, string) {
	switch {
	case b.MaxRequests > 0 && count+1 > b.MaxRequests:
		return false, "max_requests"
	case b.MaxBytes > 0 && bytes+n > b.MaxBytes:
		return false, "max_bytes"
	}
	return true, ""
}

// Add queues it, or returns an *ErrFull when a bound would be crossed.
// An item is added at most once.
func (q *Queue) Add(it *Item) error {
	if it.queued {
		return errors.New("flowcontrol: item already queued")
	}
	if it.Bytes < 0 {
		return fmt.Errorf("flowcontrol: negative size %d", it.Bytes)
	}
	if ok, reason := q.Fits(it.Bytes); !ok {
		return &ErrFull{Reason: reason}
	}
	q.seq++
	it.seq = q.seq
	b := q.band(it.Priority)
	f := b.flows[it.Flow]
	if f == nil {
		f = &flow{key: it.Flow, band: b}
		b.flows[it.Flow] = f
	}
	if len(f.items) == 0 {
		// A flow joining the ring goes last: it waits one turn of the
		// flows already waiting, never jumps them.
		if b.next == 0 {
			b.ring = append(b.ring, f)
		} else {
			b.ring = slices.Insert(b.ring, b.next, f)
			b.next++
		}
	}
	i, _ := slices.BinarySearchFunc(f.items, it, byDeadline)
	f.items = slices.Insert(f.items, i, it)
	it.flow, it.queued = f, true
	q.weights[it.Flow]++
	b.count++
	b.bytes += it.Bytes
	q.count++
	q.bytes += it.Bytes
	return nil
}

// byDeadline orders a flow's items: earliest deadline, then arrival, then
// the order they were added.
func byDeadline(a, b *Item) int {
	if c := a.Deadline.Compare(b.Deadline); c != 0 {
		return c
	}
	if c := a.Arrived.Compare(b.Arrived); c != 0 {
		return c
	}
	switch {
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

// Peek is the item Pop would return, nil when the queue is empty.
func (q *Queue) Peek() *Item {
	for _, b := range q.bands {
		if b.count > 0 {
			return b.ring[b.next%len(b.ring)].items[0]
		}
	}
	return nil
}

// Pop removes and returns the next item to dispatch: the highest band with
// items, the flow whose turn it is there, that flow's earliest deadline.
// The turn then passes to the band's next flow. nil when empty.
func (q *Queue) Pop() *Item {
	it := q.Peek()
	if it == nil {
		return nil
	}
	b := it.flow.band
	b.next = (b.next%len(b.ring) + 1) % len(b.ring)
	q.Remove(it)
	return it
}

// PopAt is Pop at time now with adaptive LIFO inside the flow: when the
// flow's earliest-deadline item has spent more than half of its wait (its
// Deadline − Arrived) in the queue, the queue is not keeping up, and the
// flow's newest item leaves instead. Under a standing backlog the requests
// dispatched are then the fresh ones, with most of their client's budget
// left to reach a first token, and the stale ones run out their wait in
// the queue and are refused there, before any prefill is spent on them;
// with FIFO every request dispatched under a backlog would have waited
// almost its whole limit, and many would be abandoned in the engine,
// their prefill wasted. This is Facebook's adaptive LIFO (B. Maurer, "Fail
// at Scale", ACM Queue 13(8), 2015: LIFO while a queue is backed up, FIFO
// otherwise); the half-wait threshold keeps short bursts in arrival order.
func (q *Queue) PopAt(now time.Time) *Item {
	it := q.Peek()
	if it == nil {
		return nil
	}
	f := it.flow
	if limit := it.Deadline.Sub(it.Arrived); limit > 0 && now.Sub(it.Arrived) > limit/2 {
		newest := f.items[0]
		for _, x := range f.items[1:] {
			if x.Arrived.After(newest.Arrived) || (x.Arrived.Equal(newest.Arrived) && x.seq > newest.seq) {
				newest = x
			}
		}
		it = newest
	}
	b := f.band
	b.next = (b.next%len(b.ring) + 1) % len(b.ring)
	q.Remove(it)
	return it
}

// Remove takes it out of the queue (a cancelled or expired request). It
// reports whether it was queued.
func (q *Queue) Remove(it *Item) bool {
	if !it.queued {
		return false
	}
	f := it.flow
	b := f.band
	i := slices.Index(f.items, it)
	f.items = slices.Delete(f.items, i, i+1)
	it.queued, it.flow = false, nil
	if q.weights[it.Flow]--; q.weights[it.Flow] == 0 {
		delete(q.weights, it.Flow)
	}
	b.count--
	b.bytes -= it.Bytes
	q.count--
	q.bytes -= it.Bytes
	if len(f.items) == 0 {
		r := slices.Index(b.ring, f)
		b.ring = slices.Delete(b.ring, r, r+1)
		if r < b.next {
			b.next--
		}
		if b.next >= len(b.ring) {
			b.next = 0
		}
		delete(b.flows, f.key)
	}
	if b.count == 0 {
		i := slices.Index(q.bands, b)
		q.bands = slices.Delete(q.bands, i, i+1)
	}
	return true
}

// Expired removes and returns the items whose deadline is not after now,
// in no particular order.
func (q *Queue) Expired(now time.Time) []*Item {
	var out []*Item
	for _, b := range q.bands {
		for _, f := range b.ring {
			for _, it := range f.items {
				if it.Deadline.After(now) {
					break // sorted by deadline
				}
				out = append(out, it)
			}
		}
	}
	for _, it := range out {
		q.Remove(it)
	}
	return out
}

// NextDeadline is the earliest deadline of any waiting item, and false
// when the queue is empty: the caller's timer for Expired.
func (q *Queue) NextDeadline() (time.Time, bool) {
	var d time.Time
	found := false
	for _, b := range q.bands {
		for _, f := range b.ring {
			if t := f.items[0].Deadline; !found || t.Before(d) {
				d, found = t, true
			}
		}
	}
	return d, found
}

func (q *Queue) findBand(p int) *band {
	for _, b := range q.bands {
		if b.priority == p {
			return b
		}
	}
	return nil
}

// band finds or makes the band of priority p, keeping bands sorted.
func (q *Queue) band(p int) *band {
	if b := q.findBand(p); b != nil {
		return b
	}
	b := &band{priority: p, flows: map[string]*flow{}}
	i, _ := slices.BinarySearchFunc(q.bands, p, func(x *band, p int) int { return cmp.Compare(p, x.priority) })
	q.bands = slices.Insert(q.bands, i, b)
	return b
}
