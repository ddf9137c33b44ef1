package actuate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// HTTP POSTs the fleet state (FleetState, as JSON) to a URL after every
// decision; any 2xx answer means applied. The receiving side owns the
// fleet, so Current reports what was last accepted.
type HTTP struct {
	url    string
	client *http.Client
	mu     sync.Mutex
	last   FleetState
}

// NewHTTP posts to url with the given timeout per request.
func NewHTTP(url string, timeout time.Duration) *HTTP {
	return &HTTP{url: url, client: &http.Client{Timeout: timeout}}
}

// Apply implements Actuator.
func (h *HTTP) Apply(ctx context.Context, d plan.Decision) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := FleetState{
		Time: d.Time, Replicas: d.Desired, Active: d.Active, Reason: d.Reason,
		Draining: drainedState(h.last.Draining, d), Remove: d.Remove,
	}
	body, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("actuate http: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("actuate http: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("actuate http: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("actuate http: POST %s: %s: %s", h.url, resp.Status, bytes.TrimSpace(msg))
	}
	h.last = st
	return nil
}

// Current implements Actuator.
func (h *HTTP) Current(context.Context) (map[string]int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.last.Replicas {
		out[k] = v
	}
	return out, nil
}
