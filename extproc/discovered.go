package extproc

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/discovery"
	"github.com/kvgate/kvgate/picker"
)

// MembersFromDiscovery turns discovered workers into router members.
func MembersFromDiscovery(ws []discovery.Worker) []Member {
	out := make([]Member, 0, len(ws))
	for _, w := range ws {
		out = append(out, Member{
			Worker:      picker.Worker{ID: w.ID, Endpoint: w.Endpoint, Role: w.Role, Draining: w.Draining},
			Model:       w.Model,
			Approximate: w.Events == "",
		})
	}
	return out
}

// EnginesFromDiscovery groups discovered workers by engine endpoint into
// the indexer's engine list: data-parallel ranks share the endpoint, and
// rank r publishes on rank 0's port + r (discovery computes them so).
func EnginesFromDiscovery(ws []discovery.Worker) []config.Engine {
	byEndpoint := map[string]*config.Engine{}
	var order []string
	for _, w := range ws {
		e := byEndpoint[w.Endpoint]
		if e == nil {
			e = &config.Engine{Endpoint: w.Endpoint, Model: w.Model, Role: roleName(w.Role), Draining: w.Draining}
			byEndpoint[w.Endpoint] = e
			order = append(order, w.Endpoint)
		}
		e.DPRanks = max(e.DPRanks, w.ID.DPRank+1)
		if w.ID.DPRank == 0 {
			e.Events, e.Replay, e.Topic = w.Events, w.Replay, w.Topic
		}
	}
	slices.Sort(order)
	out := make([]config.Engine, 0, len(order))
	for _, ep := range order {
		out = append(out, *byEndpoint[ep])
	}
	return out
}

func roleName(r picker.Role) string {
	switch r {
	case picker.RolePrefill:
		return "prefill"
	case picker.RoleDecode:
		return "decode"
	}
	return "both"
}

// KubernetesSource builds the configured Kubernetes discovery (nil when
// none is configured).
func KubernetesSource(c *config.KubernetesDiscovery, log *slog.Logger) (*discovery.KubernetesSource, error) {
	if c == nil {
		return nil, nil
	}
	kc := discovery.KubernetesConfig{
		Namespace: c.Namespace, LabelSelector: c.LabelSelector, Service: c.Service, Port: c.Port, PortName: c.PortName,
		EventsPort: c.EventsPort, ReplayPort: c.ReplayPort, DPRanks: c.DPRanks, ModelLabel: c.ModelLabel, RoleLabel: c.RoleLabel, Model: c.Model,
	}
	if err := kc.Validate(); err != nil {
		return nil, fmt.Errorf("extproc.discovery.kubernetes: %w", err)
	}
	client, err := discovery.NewClient(c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("extproc.discovery.kubernetes: %w", err)
	}
	return discovery.NewKubernetes(client, kc, log)
}

// FollowDiscovery applies every change src reports to the router and, when
// given, to the indexer's subscriptions, until ctx ends.
func FollowDiscovery(ctx context.Context, src discovery.Source, r *Router, engines func(context.Context, []config.Engine) error, log *slog.Logger) error {
	return src.Run(ctx, func(ws []discovery.Worker) {
		if err := r.SetMembers(MembersFromDiscovery(ws)); err != nil {
			log.Error("discovered workers rejected", "err", err)
			return
		}
		if engines != nil {
			if err := engines(ctx, EnginesFromDiscovery(ws)); err != nil {
				log.Error("indexer subscriptions for discovered workers", "err", err)
			}
		}
		log.Info("workers discovered", "count", len(ws))
	})
}
