package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/adminhttp"
	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/kvagent"
	"github.com/kvgate/kvgate/kvagent/agentconfig"
)

func init() {
	register("kvagent", cli.Command{
		Summary: "node-local KV tiers (host memory, disk) for engines, with residency KV events (--config FILE)",
		Run:     runKvagent,
	})
}

func runKvagent(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate kvagent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML) with a kvagent section")
	advertise := fs.String("advertise-host", "", "host (IP or DNS name) peers dial for this agent's transfer engine; overrides kvagent.peer.advertise_host (a DaemonSet passes its pod IP)")
	logFmt := cli.LogFormatFlag(fs)
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, "kvgate kvagent: --config is required")
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate kvagent: %v\n", err)
		return 2
	}
	if !cfg.Kvagent.Enabled() {
		fmt.Fprintf(stderr, "kvgate kvagent: %s: kvagent.socket: required\n", *cfgPath)
		return 2
	}
	if *advertise != "" {
		if err := agentconfig.CheckAdvertiseHost(*advertise); err != nil {
			fmt.Fprintf(stderr, "kvgate kvagent: --advertise-host: %v\n", err)
			return 2
		}
		if cfg.Kvagent.Peer.Listen == "" {
			fmt.Fprintln(stderr, "kvgate kvagent: --advertise-host: the config has no kvagent.peer")
			return 2
		}
		cfg.Kvagent.Peer.AdvertiseHost = *advertise
	}
	log, err := cli.NewProcessLogger(stderr, cli.LogFormat(*logFmt, cfg.Log.Format))
	if err != nil {
		fmt.Fprintf(stderr, "kvgate kvagent: --log-format: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serveKvagent(ctx, cfg.Kvagent, log, func(admin net.Addr, a *kvagent.Agent) {
		// The events and replay endpoints are what an engine's
		// engines[].tier_events / tier_replay name in the indexer's config.
		fmt.Fprintf(stdout, "kvgate kvagent: connector on %s, events on %s (replay %s), admin on http://%s\n", a.SocketPath(), a.EventsEndpoint(), a.ReplayEndpoint(), admin)
	}); err != nil {
		fmt.Fprintf(stderr, "kvgate kvagent: %v\n", err)
		return 1
	}
	return 0
}

// serveKvagent runs the agent until ctx ends, its admin listener behind
// kvagent.admin_auth (the bearer-token check every kvgate admin listener
// shares; /healthz and /readyz stay open for the kubelet).
func serveKvagent(ctx context.Context, cfg agentconfig.Config, log *slog.Logger, listening func(admin net.Addr, a *kvagent.Agent)) error {
	wrapAdmin := func(h http.Handler) http.Handler {
		return adminhttp.WithAdminAuth(h, "kvagent.admin", cfg.Admin, cfg.AdminAuth, log)
	}
	return kvagent.Serve(ctx, cfg, log, wrapAdmin, listening)
}
