package enginesim

import (
	"context"
	"sync"
	"time"
)

// clockedEngine drives the virtual-time Engine against the wall clock.
// Virtual time is wall time since start: the core already divides every
// step by the speed-up, so a step of 30 ms at speed-up 10 ends 3 ms of wall
// time after it began. One mutex guards the Engine and every tracked
// request; the loop sleeps until the core's next event or a new
// submission, advances the core to the wall clock, and wakes the handlers
// whose requests produced tokens.
type clockedEngine struct {
	start time.Time
	wake  chan struct{}
	// onITL observes n inter-token gaps of d (vllm:inter_token_latency_seconds).
	onITL func(d time.Duration, n int)

	mu     sync.Mutex
	eng    *Engine
	active map[string]*tracked
	// transferring counts decode requests waiting for their KV to arrive
	// (vLLM's WAITING_FOR_REMOTE_KVS, reported as waiting).
	transferring int
}

// tracked is one submitted request as its HTTP handler sees it. Fields
// after notify are guarded by clockedEngine.mu.
type tracked struct {
	id       string
	received time.Duration // virtual time the HTTP request arrived
	notify   chan struct{} // cap 1: "something changed"

	generated    int           // tokens produced so far
	firstTokenAt time.Duration // from the core's first-token record
	lastTokenAt  time.Duration // virtual time of the latest token
	final        *Output
}

func newClockedEngine(eng *Engine, onITL func(time.Duration, int)) *clockedEngine {
	return &clockedEngine{start: time.Now(), wake: make(chan struct{}, 1), eng: eng, active: map[string]*tracked{}, onITL: onITL}
}

// now is the current virtual time.
func (c *clockedEngine) now() time.Duration { return time.Since(c.start) }

// submit queues r, arriving now, and tracks it.
func (c *clockedEngine) submit(r Request, received time.Duration) (*tracked, error) {
	t := &tracked{id: r.ID, received: received, notify: make(chan struct{}, 1)}
	c.mu.Lock()
	r.Arrival = c.now()
	err := c.eng.Submit(r)
	if err == nil {
		c.active[r.ID] = t
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c.poke()
	return t, nil
}

// abort ends a request whose client went away; its blocks are freed.
func (c *clockedEngine) abort(t *tracked) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.final != nil {
		return
	}
	if o, ok := c.eng.Abort(t.id); ok {
		c.settle(t, o)
	}
	delete(c.active, t.id)
}

// release frees a finished prefill request's held blocks.
func (c *clockedEngine) release(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng.Release(id)
}

// snapshot reads the tracked request's state.
func (c *clockedEngine) snapshot(t *tracked) (generated int, final *Output) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.generated, t.final
}

func (c *clockedEngine) stats() (Stats, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng.Stats(), c.transferring
}

func (c *clockedEngine) addTransferring(d int) {
	c.mu.Lock()
	c.transferring += d
	c.mu.Unlock()
}

func (c *clockedEngine) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run advances the engine until ctx ends.
func (c *clockedEngine) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, ok := c.step()
		if !ok {
			wait = time.Hour
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-timer.C:
		}
	}
}

// step advances the core to now and reports how long until its next event.
func (c *clockedEngine) step() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, o := range c.eng.Advance(now) {
		t := c.active[o.ID]
		if t == nil {
			continue
		}
		if t.generated == 0 && o.OutputTokens > 0 {
			t.firstTokenAt = o.FirstTokenAt
		}
		if o.Done {
			c.settle(t, o)
			delete(c.active, o.ID)
		}
	}
	// Streams are fed per step: the core reports only first-token and
	// final records, so progress is read for every tracked request.
	end := c.eng.Now()
	for id, t := range c.active {
		if g, ok := c.eng.Progress(id); ok && g > t.generated {
			c.produced(t, g, end)
			signal(t.notify)
		}
	}
	next, ok := c.eng.NextEventTime()
	if !ok {
		return 0, false
	}
	return max(next-c.now(), 0), true
}

// produced records tokens up to count generated, the latest at time at.
// The core reports the first token's time exactly; later tokens that
// arrived in one Advance (the loop fell behind the steps) share the gap
// since the previous one evenly.
func (c *clockedEngine) produced(t *tracked, count int, at time.Duration) {
	n := count - t.generated
	if n <= 0 {
		return
	}
	prev := t.lastTokenAt
	if t.generated == 0 {
		prev = t.firstTokenAt
		n--
	}
	if n > 0 && c.onITL != nil {
		c.onITL((at-prev)/time.Duration(n), n)
	}
	t.generated, t.lastTokenAt = count, at
}

func (c *clockedEngine) settle(t *tracked, o Output) {
	if t.generated == 0 {
		t.firstTokenAt = o.FirstTokenAt
	}
	if o.OutputTokens > t.generated {
		c.produced(t, o.OutputTokens, o.FinishedAt)
	}
	t.final = &o
	signal(t.notify)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
