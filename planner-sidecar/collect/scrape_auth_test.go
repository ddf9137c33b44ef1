package collect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// requireBearer serves page only to requests carrying the current token,
// as kvgate's admin listeners do beyond loopback (401 otherwise).
type requireBearer struct {
	mu    sync.Mutex
	token string
	page  string
	seen  []string // Authorization headers received
}

func (h *requireBearer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := r.Header.Get("Authorization")
	h.seen = append(h.seen, got)
	if got != "Bearer "+h.token {
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	io.WriteString(w, h.page)
}

func (h *requireBearer) setToken(t string) {
	h.mu.Lock()
	h.token = t
	h.mu.Unlock()
}

func TestScraperSendsBearerToken(t *testing.T) {
	engine := &requireBearer{token: "engine-and-extproc-token-01", page: `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 7
`}
	srv := httptest.NewServer(engine)
	defer srv.Close()
	ep := strings.TrimPrefix(srv.URL, "http://")
	ext := &requireBearer{token: engine.token, page: fmt.Sprintf(`# TYPE kvgate_extproc_worker_inflight_requests gauge
kvgate_extproc_worker_inflight_requests{worker="%s#0"} 2
`, ep)}
	extSrv := httptest.NewServer(ext)
	defer extSrv.Close()
	extAddr := strings.TrimPrefix(extSrv.URL, "http://")
	pools := map[string][]string{"aggregated": {ep}}
	t0 := time.Unix(1000, 0)

	// Without a token: both targets answer 401, and the errors say what
	// is missing.
	s := NewScraper(pools, extAddr, time.Second)
	_, errs := s.Collect(context.Background(), t0, nil)
	if len(errs) != 2 {
		t.Fatalf("without a token: errors %v, want one per target", errs)
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "planner.scrape.token_file") {
			t.Errorf("without a token: %v", err)
		}
	}

	// With it: both targets are read (the engine's queue, extproc's
	// in-flight request keeps the draining engine from counting as idle).
	token := engine.token
	s = NewScraper(pools, extAddr, time.Second).WithToken(func() (string, error) { return token, nil })
	obs, errs := s.Collect(context.Background(), t0, map[string]string{ep: "aggregated"})
	o := obs.Pools["aggregated"]
	if len(errs) != 0 || o.QueueDepth != 7 || o.Draining != 1 || len(o.Idle) != 0 {
		t.Fatalf("with the token: %+v %v", o, errs)
	}
	if last := engine.seen[len(engine.seen)-1]; last != "Bearer "+token {
		t.Fatalf("engine saw Authorization %q", last)
	}

	// The token source is asked again each round: a rotated token applies
	// at the next Collect, and a stale one is refused by name.
	engine.setToken("rotated-token-0123456789")
	ext.setToken("rotated-token-0123456789")
	_, errs = s.Collect(context.Background(), t0.Add(10*time.Second), nil)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "refused planner.scrape's token") {
		t.Fatalf("stale token: %v", errs)
	}
	token = "rotated-token-0123456789"
	if _, errs = s.Collect(context.Background(), t0.Add(20*time.Second), nil); len(errs) != 0 {
		t.Fatalf("rotated token: %v", errs)
	}

	// A token that cannot be read fails every target without a request,
	// and the error carries the source's message.
	n := len(engine.seen)
	s = NewScraper(pools, extAddr, time.Second).WithToken(func() (string, error) {
		return "", errors.New("open /var/run/secrets/kvgate/admin/token: no such file or directory")
	})
	_, errs = s.Collect(context.Background(), t0, nil)
	var se *SourceError
	if len(errs) != 2 || !errors.As(errs[0], &se) || !strings.Contains(errs[0].Error(), "bearer token: open /var/run/secrets") {
		t.Fatalf("unreadable token: %v", errs)
	}
	if len(engine.seen) != n {
		t.Fatal("scraped without the token it could not read")
	}
}
