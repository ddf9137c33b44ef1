// Package kvagentd is the `kvgate kvagent` process in the daemon shell:
// its --advertise-host flag, the kvagent section it requires, and the
// agent it starts and drains.
package kvagentd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/kvagent"
	"github.com/kvgate/kvgate/kvagent/agentconfig"
)

// Spec is `kvgate kvagent`.
var Spec = daemon.Spec{
	Name:       "kvagent",
	Summary:    "node-local KV tiers (host memory, disk) for engines, with residency KV events (--config FILE)",
	ConfigHelp: "configuration file (YAML) with a kvagent section",
	Flags:      flags,
}

func flags(fs *flag.FlagSet) daemon.Parts {
	advertise := fs.String("advertise-host", "", "host (IP or DNS name) peers dial for this agent's transfer engine; overrides kvagent.peer.advertise_host (a DaemonSet passes its pod IP)")
	return daemon.Parts{
		Override: func(cfg *config.Config) error {
			if *advertise == "" {
				return nil
			}
			if err := agentconfig.CheckAdvertiseHost(*advertise); err != nil {
				return fmt.Errorf("--advertise-host: %w", err)
			}
			if cfg.Kvagent.Peer.Listen == "" {
				return errors.New("--advertise-host: the config has no kvagent.peer")
			}
			cfg.Kvagent.Peer.AdvertiseHost = *advertise
			return nil
		},
		Check: func(cfg config.Config, file string) error {
			if !cfg.Kvagent.Enabled() {
				return fmt.Errorf("%s: kvagent.socket: required", file)
			}
			return nil
		},
		Start: Start,
	}
}

// Start starts the agent (store, connector, peer transfers, residency
// events); the process it returns drains it within kvagent.drain_timeout:
// the connector's drain, then the store's close announcing its host
// blocks removed, then the events flushed.
func Start(_ context.Context, cfg config.Config, env daemon.Env) (*daemon.Process, error) {
	k := cfg.Kvagent
	reg := daemon.NewRegistry()
	a, err := kvagent.Start(k, reg, env.Log)
	if err != nil {
		return nil, err
	}
	p := &daemon.Process{
		Admin: daemon.Admin{
			Key: "kvagent.admin", Addr: k.Admin, Auth: k.AdminAuth,
			Metrics: reg,
			Ready:   func(context.Context) error { return a.Ready() },
		},
		Started: func(_ context.Context, admin net.Addr) {
			// The events and replay endpoints are what an engine's
			// engines[].tier_events / tier_replay name in the indexer's config.
			env.Announce("connector on %s, events on %s (replay %s), admin on http://%s", a.SocketPath(), a.EventsEndpoint(), a.ReplayEndpoint(), admin)
		},
		Run: func(ctx context.Context) error {
			<-ctx.Done()
			env.Log.Info("kvagent draining")
			return nil
		},
		Drain:      a.Close,
		DrainBound: k.DrainTimeout.D(),
	}
	// Closing twice is a no-op: this only acts when Serve returns
	// without draining (the admin address taken).
	p.OnClose(func() { a.Close(context.Background()) })
	return p, nil
}
