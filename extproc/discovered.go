package extproc

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kvgate/kvgate/extproc/discovery"
	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/internal/kvfleet"
)

// KubernetesSource builds the configured Kubernetes discovery (nil when
// none is configured); the section is validated here, when extproc starts
// watching, not by every process that parses the file.
func KubernetesSource(c *kubeselect.Config, log *slog.Logger) (*discovery.KubernetesSource, error) {
	if c == nil {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("extproc.discovery.kubernetes: %w", err)
	}
	client, err := discovery.NewClient(c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("extproc.discovery.kubernetes: %w", err)
	}
	return discovery.NewKubernetes(client, *c, log)
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
