// Package indexerd is the `kvgate indexer` process in the daemon shell:
// its --listen flag, and the service it starts (the index, the engines'
// event subscriptions, /status).
package indexerd

import (
	"context"
	"flag"
	"fmt"
	"net"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/indexer"
)

// Spec is `kvgate indexer`.
var Spec = daemon.Spec{
	Name:       "indexer",
	Summary:    "subscribe to engines' KV events and keep the fleet KV index (--config FILE)",
	ConfigHelp: "configuration file (YAML): engines, models, index, indexer",
	Flags:      flags,
}

func flags(fs *flag.FlagSet) daemon.Parts {
	listen := fs.String("listen", "", "override indexer.listen (host:port for /metrics, /healthz, /readyz, /status)")
	return daemon.Parts{
		Override: func(cfg *config.Config) error {
			if *listen != "" {
				cfg.Indexer.Listen = *listen
			}
			return nil
		},
		Start: Start,
	}
}

// Start opens the index and builds the service; the process it returns
// runs the subscriptions until ctx ends, then closes the index.
func Start(ctx context.Context, cfg config.Config, env daemon.Env) (*daemon.Process, error) {
	p := &daemon.Process{}
	idx, err := indexer.OpenIndex(ctx, cfg.Index)
	if err != nil {
		return nil, err
	}
	p.OnClose(func() { idx.Close() })
	workers, err := cfg.Workers()
	if err != nil {
		return p.Abort(err)
	}
	svc, err := indexer.New(indexer.ServiceConfig{Index: cfg.Index, Indexer: cfg.Indexer, Models: cfg.Models, Workers: workers}, idx, env.Log)
	if err != nil {
		return p.Abort(err)
	}
	reg := daemon.NewRegistry()
	reg.MustRegister(svc.Collector())
	p.Admin = daemon.Admin{
		Key: "indexer.listen", Addr: cfg.Indexer.Listen, Auth: cfg.Indexer.AdminAuth,
		Metrics: reg,
		// The service runs and the index answers.
		Ready: func(ctx context.Context) error {
			if err := svc.Ready(ctx); err != nil {
				return fmt.Errorf("not ready: %w", err)
			}
			return nil
		},
		Routes: svc.Handler(), // /status
	}
	p.Started = func(_ context.Context, admin net.Addr) {
		env.Announce("serving /metrics /healthz /readyz /status on http://%s", admin)
	}
	p.Run = svc.Run
	return p, nil
}
