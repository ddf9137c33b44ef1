package indexer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// WaitSynced blocks until every current event stream has caught up with
// its engine once (kvstream.Stats.Synced), or ctx ends. A process holding
// the index in memory calls it before reporting ready, so that a restarted
// extproc rebuilds from the engines' replay buffers before routing instead
// of routing its first requests on an empty index. On ctx's end it returns
// an error naming the workers still unsynced; callers treat that as "ready
// anyway": an unreachable engine must not keep the router out of service.
func (s *Service) WaitSynced(ctx context.Context) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		pending := s.unsynced()
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("event streams not synced: %s", strings.Join(pending, ", "))
		case <-tick.C:
		}
	}
}

func (s *Service) unsynced() []string {
	var pending []string
	for _, st := range s.snapshot() {
		if !st.sub.Stats().Synced {
			pending = append(pending, st.worker.String())
		}
	}
	slices.Sort(pending)
	return pending
}
