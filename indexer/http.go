package indexer

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvgate/kvgate/kv/ingest"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/kv/kvstream"
)

// Handler serves /metrics, /healthz (the process is up), /readyz (the
// service runs and the index answers) and /status (JSON for humans).
func (s *Service) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), s.Collector())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		st, err := s.Status(ctx)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	})
	return mux
}

// Status is a snapshot of the whole service.
type Status struct {
	Backend    string         `json:"backend"`
	Index      kvindex.Stats  `json:"index"`
	IndexError string         `json:"index_error,omitempty"`
	Workers    []WorkerStatus `json:"workers"`
}

// WorkerStatus is one worker's event path.
type WorkerStatus struct {
	Worker       string         `json:"worker"`
	Model        string         `json:"model"`
	Events       string         `json:"events"`
	Stream       kvstream.Stats `json:"stream"`
	Ingest       ingest.Stats   `json:"ingest"`
	DecodeErrors uint64         `json:"decode_errors"`
	// LagSeconds is how long ago (by this host's clock) the engine stamped
	// the last applied batch; -1 before the first batch.
	LagSeconds float64 `json:"lag_seconds"`
}

// Status gathers every worker's counters and the index size.
func (s *Service) Status(ctx context.Context) (Status, error) {
	st := Status{Backend: s.cfg.Index.Backend}
	stats, err := s.idx.Stats(ctx)
	if err != nil {
		st.IndexError = err.Error()
	}
	st.Index = stats
	for _, w := range s.snapshot() {
		st.Workers = append(st.Workers, w.status())
	}
	return st, err
}

func (st *stream) status() WorkerStatus {
	return WorkerStatus{
		Worker:       st.label,
		Model:        st.model,
		Events:       st.endpoint,
		Stream:       st.sub.Stats(),
		Ingest:       st.ing.Stats(),
		DecodeErrors: st.decodeErrors.Load(),
		LagSeconds:   jsonLag(st.lag()),
	}
}

// jsonLag maps "no batch yet" (NaN, which JSON cannot carry) to -1.
func jsonLag(l float64) float64 {
	if math.IsNaN(l) {
		return -1
	}
	return l
}
