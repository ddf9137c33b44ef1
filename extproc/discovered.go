package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/kvgate/kvgate/extproc/discovery"
	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// DiscoverySource builds the configured discovery, nil when none:
// extproc.discovery.kubernetes (labels or EndpointSlices) or
// extproc.discovery.inference_pool. For a pool, the router takes the
// pool's InferenceObjective priorities, and poolState (may be nil) hears
// whether the pool is there (the caller fails readiness while it is not).
func DiscoverySource(d extprocconfig.Discovery, r *Router, poolState func(error), log *slog.Logger) (discovery.Source, error) {
	if err := ValidateDiscovery(d); err != nil {
		return nil, err
	}
	switch {
	case d.Kubernetes != nil:
		return KubernetesSource(d.Kubernetes, log)
	case d.InferencePool != nil:
		return InferencePoolSource(*d.InferencePool, r, poolState, log)
	}
	return nil, nil
}

// ValidateDiscovery checks the discovery section the extproc is about to
// start (every other process ignores it): the chosen source's keys, and
// that at most one is chosen.
func ValidateDiscovery(d extprocconfig.Discovery) error {
	switch {
	case d.Kubernetes != nil && d.InferencePool != nil:
		return errors.New("extproc.discovery: kubernetes and inference_pool are exclusive (one source of workers)")
	case d.Kubernetes != nil:
		if err := d.Kubernetes.Validate(); err != nil {
			return fmt.Errorf("extproc.discovery.kubernetes: %w", err)
		}
	case d.InferencePool != nil:
		if err := d.InferencePool.Validate(); err != nil {
			return fmt.Errorf("extproc.discovery.inference_pool: %w", err)
		}
	}
	return nil
}

// InferencePoolSource builds the InferencePool discovery. An empty
// namespace is resolved as GIE's picker does (v1.5.0
// cmd/epp/runner/runner.go resolvePoolNamespace): the NAMESPACE
// environment variable (the chart sets it from the downward API), else
// "default".
func InferencePoolSource(c kubeselect.InferencePool, r *Router, poolState func(error), log *slog.Logger) (*discovery.InferencePoolSource, error) {
	if c.Namespace == "" {
		c.Namespace = os.Getenv("NAMESPACE")
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("extproc.discovery.inference_pool: %w", err)
	}
	client, err := discovery.NewClient(c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("extproc.discovery.inference_pool: %w", err)
	}
	return discovery.NewInferencePool(client, c, discovery.PoolHooks{Objectives: r.SetObjectives, PoolState: poolState}, log)
}

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
