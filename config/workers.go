package config

import (
	"fmt"

	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// Workers expands the engines list into the fleet's one worker shape, one
// worker per data-parallel rank, in the file's order (engine, then rank).
// It is the only conversion from the YAML shape (Engine) to kvfleet.Worker:
// the router, the indexer and the engine-metrics scraper all take its
// result, as they take Kubernetes discovery's.
//
// Rank r's KV events, replay and kvagent endpoints are rank 0's port + r,
// as vLLM offsets its data-parallel ranks (confaddr.ZMQEndpoint); a bind-mode
// engine's events stay EventsBindMode (it dials the indexer, whose bound
// port is offset instead). Call it on a validated Config (Parse, Load,
// Default): it relies on Validate for roles, models and rank bounds, and
// reports only a rank whose offset port leaves the port range.
func (c *Config) Workers() ([]kvfleet.Worker, error) {
	var out []kvfleet.Worker
	for i, e := range c.Engines {
		p := fmt.Sprintf("engines[%d]", i)
		role, err := kvfleet.ParseRole(e.Role)
		if err != nil {
			return nil, fmt.Errorf("%s.role: %w", p, err)
		}
		for rank := range max(e.DPRanks, 1) {
			w := kvfleet.Worker{
				ID:       kvfleet.WorkerID{Endpoint: e.Endpoint, DPRank: rank},
				Model:    e.Model,
				Role:     role,
				Draining: e.Draining,
				Topic:    e.Topic,
				Kind:     e.Kind,
			}
			if e.Events == EventsBindMode {
				w.Events = e.Events
			} else if w.Events, err = rankEndpoint(e.Events, rank); err != nil {
				return nil, fmt.Errorf("%s.events: rank %d: %w", p, rank, err)
			}
			if w.Replay, err = rankEndpoint(e.Replay, rank); err != nil {
				return nil, fmt.Errorf("%s.replay: rank %d: %w", p, rank, err)
			}
			if w.TierEvents, err = rankEndpoint(e.TierEvents, rank); err != nil {
				return nil, fmt.Errorf("%s.tier_events: rank %d: %w", p, rank, err)
			}
			if w.TierReplay, err = rankEndpoint(e.TierReplay, rank); err != nil {
				return nil, fmt.Errorf("%s.tier_replay: rank %d: %w", p, rank, err)
			}
			out = append(out, w)
		}
	}
	return out, nil
}

// rankEndpoint is confaddr.ZMQEndpoint for an optional endpoint ("" stays "").
func rankEndpoint(ep string, rank int) (string, error) {
	if ep == "" {
		return "", nil
	}
	s, _, err := confaddr.ZMQEndpoint(ep, rank)
	return s, err
}
