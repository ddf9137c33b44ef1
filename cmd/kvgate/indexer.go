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
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/internal/adminhttp"
	"github.com/kvgate/kvgate/internal/cli"
)

func init() {
	register("indexer", cli.Command{
		Summary: "subscribe to engines' KV events and keep the fleet KV index (--config FILE)",
		Run:     runIndexer,
	})
}

func runIndexer(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate indexer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML); embedded defaults when empty")
	logFmt := cli.LogFormatFlag(fs)
	listen := fs.String("listen", "", "override indexer.listen (host:port for /metrics, /healthz, /readyz, /status)")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			fmt.Fprintf(stderr, "kvgate indexer: %v\n", err)
			return 2
		}
	}
	if *listen != "" {
		cfg.Indexer.Listen = *listen
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "kvgate indexer: --listen: %v\n", err)
			return 2
		}
	}
	log, err := cli.NewProcessLogger(stderr, cli.LogFormat(*logFmt, cfg.Log.Format))
	if err != nil {
		fmt.Fprintf(stderr, "kvgate indexer: --log-format: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serveIndexer(ctx, cfg, log, func(addr net.Addr) {
		fmt.Fprintf(stdout, "kvgate indexer: serving /metrics /healthz /readyz /status on http://%s\n", addr)
	}); err != nil {
		fmt.Fprintf(stderr, "kvgate indexer: %v\n", err)
		return 1
	}
	return 0
}

// serveIndexer runs the indexer service and its HTTP endpoints until ctx is
// cancelled, then drains: HTTP first (so probes see it going), then the
// subscriptions, then the index.
func serveIndexer(ctx context.Context, cfg config.Config, log *slog.Logger, listening func(net.Addr)) error {
	idx, err := indexer.OpenIndex(ctx, cfg.Index)
	if err != nil {
		return err
	}
	defer idx.Close()
	workers, err := cfg.Workers()
	if err != nil {
		return err
	}
	svc, err := indexer.New(indexer.ServiceConfig{Index: cfg.Index, Indexer: cfg.Indexer, Models: cfg.Models, Workers: workers}, idx, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Indexer.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Indexer.Listen, err)
	}
	srv := adminhttp.NewServer(adminhttp.WithAdminAuth(svc.Handler(), "indexer.listen", cfg.Indexer.Listen, cfg.Indexer.AdminAuth, log))
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("http server", "err", err)
		}
	}()
	if listening != nil {
		listening(ln.Addr())
	}
	runErr := svc.Run(ctx)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	log.Info("indexer stopped")
	return runErr
}
