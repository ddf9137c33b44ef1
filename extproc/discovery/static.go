package discovery

import (
	"context"
	"fmt"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/kvfleet"
)

// StaticSource is the configuration file's engine list; it never changes.
type StaticSource struct {
	workers []Worker
}

var _ Source = (*StaticSource)(nil)

// Static expands each engine into one Worker per data-parallel rank. Rank r
// listens for KV events on the configured port + r, as vLLM offsets its
// data-parallel ranks (config.ZMQEndpoint).
func Static(engines []config.Engine) (*StaticSource, error) {
	var ws []Worker
	seen := map[kvfleet.WorkerID]bool{}
	for i, e := range engines {
		p := fmt.Sprintf("engines[%d]", i)
		role, err := ParseRole(e.Role)
		if err != nil {
			return nil, fmt.Errorf("discovery: %s.role: %w", p, err)
		}
		ranks := e.DPRanks
		if ranks == 0 {
			ranks = 1
		}
		if ranks < 0 || ranks > 1024 {
			return nil, fmt.Errorf("discovery: %s.dp_ranks: %d outside 1..1024", p, ranks)
		}
		if e.Endpoint == "" || e.Model == "" {
			return nil, fmt.Errorf("discovery: %s: endpoint and model are required", p)
		}
		for r := range ranks {
			w := Worker{
				ID:       kvfleet.WorkerID{Endpoint: e.Endpoint, DPRank: r},
				Endpoint: e.Endpoint,
				Model:    e.Model,
				Role:     role,
				Draining: e.Draining,
			}
			if seen[w.ID] {
				return nil, fmt.Errorf("discovery: %s: duplicate worker %s", p, w.ID)
			}
			seen[w.ID] = true
			w.Topic = e.Topic
			if e.Events == config.EventsBindMode {
				w.Events = e.Events // the engine dials the indexer; nothing to offset
			} else if e.Events != "" {
				if w.Events, _, err = config.ZMQEndpoint(e.Events, r); err != nil {
					return nil, fmt.Errorf("discovery: %s.events: %w", p, err)
				}
			}
			if e.Replay != "" {
				if w.Replay, _, err = config.ZMQEndpoint(e.Replay, r); err != nil {
					return nil, fmt.Errorf("discovery: %s.replay: %w", p, err)
				}
			}
			ws = append(ws, w)
		}
	}
	sortWorkers(ws)
	return &StaticSource{workers: ws}, nil
}

// Run reports the list once and waits for ctx to end.
func (s *StaticSource) Run(ctx context.Context, onChange func([]Worker)) error {
	onChange(append([]Worker(nil), s.workers...))
	<-ctx.Done()
	return nil
}
