package connector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// onboardReleaseDelay bounds how long an onboard's slots stay pinned
// waiting for the next Onboard's Acquire to carry their Release
// (AcquireRequest.release). The Release round trip was about a third of
// an onboard of 16 blocks of 512 KiB (BENCHMARKS.md, kvagent engine
// connector); an engine onboards the hits of one scheduler step back to
// back, so the next Acquire usually comes well within this, and a slot
// pinned a millisecond longer only defers its eviction.
const onboardReleaseDelay = time.Millisecond

// releaseQueue holds onboarded slots until a Release carries them.
type releaseQueue struct {
	mu      sync.Mutex
	pending []int32
	timer   *time.Timer
	err     error // a background Release that failed, for ReleaseOnboarded/Close
	// sending counts armed timers and the Releases they send: added when
	// a timer is armed, done when it is stopped before firing or when
	// its send returns.
	sending sync.WaitGroup
}

// take empties the queue.
func (q *releaseQueue) take() []int32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pending
	q.pending = nil
	if q.timer != nil {
		if q.timer.Stop() {
			q.sending.Done()
		}
		q.timer = nil
	}
	return p
}

// add queues slots; send runs on its own within onboardReleaseDelay
// unless an Acquire takes them first.
func (q *releaseQueue) add(slots []int32, send func()) {
	if len(slots) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, slots...)
	if q.timer == nil {
		q.sending.Add(1)
		q.timer = time.AfterFunc(onboardReleaseDelay, send)
	}
}

func (q *releaseQueue) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		q.err = err
	}
}

// releaseNow is the timer's send: a Release of what is queued.
func (c *Client) releaseNow() {
	defer c.rel.sending.Done()
	slots := c.rel.take()
	if len(slots) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.releaseChunked(ctx, slots); err != nil {
		c.rel.fail(err)
	}
}

// releaseChunked releases onboarded slots in requests of at most MaxChain
// slots (the agent's bound on one request).
func (c *Client) releaseChunked(ctx context.Context, slots []int32) error {
	var errs []error
	for len(slots) > 0 {
		n := min(len(slots), max(c.maxChain, 1))
		if err := c.Release(ctx, slots[:n]); err != nil {
			errs = append(errs, fmt.Errorf("connector: release of %d onboarded slots: %w", n, err))
		}
		slots = slots[n:]
	}
	return errors.Join(errs...)
}

// ReleaseOnboarded sends now the Release of onboarded slots still waiting
// for the next Acquire, waits for any such Release already on its way,
// and returns the first of them that failed since the last call.
func (c *Client) ReleaseOnboarded(ctx context.Context) error {
	var err error
	if slots := c.rel.take(); len(slots) > 0 {
		err = c.releaseChunked(ctx, slots)
	}
	c.rel.sending.Wait()
	c.rel.mu.Lock()
	err, c.rel.err = errors.Join(c.rel.err, err), nil
	c.rel.mu.Unlock()
	return err
}

// releaseFailed handles an Acquire that failed while carrying release,
// and reports whether to try the Acquire again alone. The agent validates
// a request (INVALID_ARGUMENT) and then applies its release
// (FAILED_PRECONDITION: those slots were not held any more, e.g. given
// back at their hold timeout) before acquiring anything, so after either
// nothing was acquired: a refused release is reported, an unvalidated one
// is sent again on its own, and the Acquire is retried alone. When the
// request may not have reached the agent the slots are queued again;
// after any other failure the agent had applied the release.
func (c *Client) releaseFailed(release []int32, err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition:
		c.rel.fail(fmt.Errorf("connector: release of %d onboarded slots: %w", len(release), err))
		return true
	case codes.InvalidArgument:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if rerr := c.releaseChunked(ctx, release); rerr != nil {
			c.rel.fail(rerr)
		}
		return true
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable:
		c.rel.add(release, c.releaseNow)
	}
	return false
}
