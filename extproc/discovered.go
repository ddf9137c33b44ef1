package extproc

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/discovery"
	"github.com/kvgate/kvgate/internal/kvfleet"
)

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
// given, to the indexer's subscriptions (indexer.Service.SetWorkers), until
// ctx ends. Both take the discovered workers as they are: one shape, no
// conversion.
func FollowDiscovery(ctx context.Context, src discovery.Source, r *Router, workers func(context.Context, []kvfleet.Worker) error, log *slog.Logger) error {
	return src.Run(ctx, func(ws []kvfleet.Worker) {
		if err := r.SetMembers(ws); err != nil {
			log.Error("discovered workers rejected", "err", err)
			return
		}
		if workers != nil {
			if err := workers(ctx, ws); err != nil {
				log.Error("indexer subscriptions for discovered workers", "err", err)
			}
		}
		log.Info("workers discovered", "count", len(ws))
	})
}
