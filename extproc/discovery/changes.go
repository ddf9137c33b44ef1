package discovery

import (
	"context"
	"time"

	"k8s.io/client-go/tools/cache"
)

// changes turns informer events into recomputes of the whole set: any
// add, update or delete marks one recompute pending (events meanwhile
// coalesce), and the loop recomputes once the burst it belongs to has
// settled (a rollout touches many pods at once). Both Kubernetes sources
// recompute from their informer caches rather than patching event by
// event, so a missed or reordered event cannot leave the set wrong.
type changes struct {
	kick chan struct{}
}

func newChanges() *changes {
	return &changes{kick: make(chan struct{}, 1)}
}

// handler is the event handler to add to each informer.
func (c *changes) handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.signal() },
		UpdateFunc: func(any, any) { c.signal() },
		DeleteFunc: func(any) { c.signal() },
	}
}

func (c *changes) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// next waits for an event, then for debounce; false once ctx ends.
func (c *changes) next(ctx context.Context, debounce time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c.kick:
	}
	t := time.NewTimer(debounce)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
