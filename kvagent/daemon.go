package kvagent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/kvgate/kvgate/kvagent/agentconfig"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve runs the agent and its admin endpoints until ctx ends, then
// drains: /readyz turns 503 first, then the agent stops (connector drain,
// store close announcing its host blocks removed, events flushed).
// wrapAdmin, when not nil, wraps the admin handler: `kvgate kvagent`
// passes the bearer-token check of kvagent.admin_auth that every kvgate
// admin listener shares (it lives with the command, not here).
func Serve(ctx context.Context, cfg agentconfig.Config, log *slog.Logger, wrapAdmin func(http.Handler) http.Handler, listening func(admin net.Addr, a *Agent)) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a, err := Start(cfg, reg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Admin)
	if err != nil {
		a.Close(context.Background())
		return fmt.Errorf("listen %s: %w", cfg.Admin, err)
	}
	draining := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-draining:
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		default:
		}
		if err := a.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	var h http.Handler = mux
	if wrapAdmin != nil {
		h = wrapAdmin(mux)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("admin server", "err", err)
		}
	}()
	if listening != nil {
		listening(ln.Addr(), a)
	}
	<-ctx.Done()
	close(draining)
	log.Info("kvagent draining")
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout.D())
	defer cancel()
	closeErr := a.Close(drainCtx)
	shutdownCtx, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	_ = srv.Shutdown(shutdownCtx)
	log.Info("kvagent stopped", "err", closeErr)
	return closeErr
}
