package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvgate/kvgate/internal/adminhttp"
	"github.com/kvgate/kvgate/internal/secretfiles"
)

// Admin is a daemon's admin listener: its address and token (the key
// path names both in logs and errors), its metrics, its probes and any
// routes of its own.
type Admin struct {
	// Key is the address's key path ("indexer.listen", "kvagent.admin").
	Key  string
	Addr string
	Auth secretfiles.AdminAuth
	// Metrics, if set, is served on GET /metrics (NewRegistry gives the
	// Go and process collectors every daemon exports).
	Metrics prometheus.Gatherer
	// Healthy, if set, decides GET /healthz (nil: "ok" while the process
	// runs).
	Healthy func() error
	// Ready, if set, decides GET /readyz once the drain has not begun
	// (nil: ready until the drain, which answers "draining"). Its error is
	// the 503's body.
	Ready func(ctx context.Context) error
	// Routes, if set, serves every other path (/status, /debug/decisions).
	Routes http.Handler
}

// readyTimeout bounds one readiness check (an index ping).
const readyTimeout = 2 * time.Second

// NewRegistry is a daemon's metrics registry with the Go runtime and
// process collectors registered.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// handler is the admin mux: metrics, the probes and the daemon's routes,
// behind the admin token (adminhttp.WithAdminAuth leaves the probes open
// for the kubelet).
func (a Admin) handler(draining func() bool, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	if a.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(a.Metrics, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if a.Healthy != nil {
			if err := a.Healthy(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if a.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if err := a.Ready(ctx); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ready\n"))
	})
	if a.Routes != nil {
		mux.Handle("/", a.Routes)
	}
	return adminhttp.WithAdminAuth(mux, a.Key, a.Addr, a.Auth, log)
}

// AdminListener is a serving admin listener.
type AdminListener struct {
	ln  net.Listener
	srv *http.Server
}

// ListenAdmin serves a's handler on a.Addr until Shutdown; draining tells
// /readyz the process is draining. Serve calls it; the extproc, which the
// lab also runs without the shell, calls it from its own Serve.
func ListenAdmin(a Admin, draining func() bool, log *slog.Logger) (*AdminListener, error) {
	ln, err := net.Listen("tcp", a.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", a.Addr, err)
	}
	srv := adminhttp.NewServer(a.handler(draining, log))
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server", "key", a.Key, "err", err)
		}
	}()
	return &AdminListener{ln: ln, srv: srv}, nil
}

// Addr is where it listens.
func (l *AdminListener) Addr() net.Addr { return l.ln.Addr() }

// Shutdown lets requests in flight finish, up to bound, then closes.
func (l *AdminListener) Shutdown(bound time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := l.srv.Shutdown(ctx); err != nil {
		l.srv.Close()
	}
}
