package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Endpoints are the fake model servers: OpenAI-style HTTP servers on
// loopback that answer what a picker may ask of a model server (/health,
// /metrics, /v1/models) and the completions the suite forwards to the
// picker's choice, streamed as server-sent events when asked.
type Endpoints struct {
	servers []*http.Server
	addrs   []string
	models  map[string]string // endpoint → the model it serves

	mu     sync.Mutex
	served map[string]int // endpoint → completions answered
}

// SSEEvents is how many data events a streamed completion carries before
// its [DONE] line.
const SSEEvents = 4

// StartEndpoints listens on each of addrs (":0" ports pick a free one) and
// serves; models[i] names the model endpoint i serves. Close stops them.
func StartEndpoints(addrs []string, models []string) (*Endpoints, error) {
	if len(addrs) != len(models) {
		return nil, fmt.Errorf("conformance endpoints: %d addresses for %d models", len(addrs), len(models))
	}
	e := &Endpoints{models: map[string]string{}, served: map[string]int{}}
	for i, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("conformance endpoint %s: %w", a, err)
		}
		addr := ln.Addr().String()
		srv := &http.Server{Handler: e.handler(addr, models[i]), ReadHeaderTimeout: 10 * time.Second}
		e.servers = append(e.servers, srv)
		e.addrs = append(e.addrs, addr)
		e.models[addr] = models[i]
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return
			}
		}()
	}
	return e, nil
}

// Addrs lists the endpoints' ip:port, in the order started.
func (e *Endpoints) Addrs() []string { return append([]string(nil), e.addrs...) }

// Model returns the model endpoint addr serves.
func (e *Endpoints) Model(addr string) string { return e.models[addr] }

// Serving lists the endpoints serving model, in the order started.
func (e *Endpoints) Serving(model string) []string {
	var out []string
	for _, a := range e.addrs {
		if e.models[a] == model {
			out = append(out, a)
		}
	}
	return out
}

// Models lists the distinct models, in the order first served.
func (e *Endpoints) Models() []string {
	var out []string
	for _, a := range e.addrs {
		if m := e.models[a]; !contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// Served reports how many completions addr answered.
func (e *Endpoints) Served(addr string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.served[addr]
}

// Close stops every endpoint.
func (e *Endpoints) Close() {
	for _, s := range e.servers {
		s.Close()
	}
}

// maxForwardedBody bounds what an endpoint reads of a forwarded request.
const maxForwardedBody = 64 << 20

func (e *Endpoints) handler(addr, model string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	// vLLM's load gauges at rest (vllm/v1/metrics/loggers.py), for pickers
	// that scrape them.
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "vllm:num_requests_waiting{model_name=%q} 0\nvllm:num_requests_running{model_name=%q} 0\nvllm:kv_cache_usage_perc{model_name=%q} 0\n", model, model, model)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"conformance"}]}`, model)
	})
	complete := func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, maxForwardedBody)).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.served[addr]++
		e.mu.Unlock()
		if !req.Stream {
			w.Header().Set("content-type", "application/json")
			fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`, model)
			return
		}
		w.Header().Set("content-type", "text/event-stream")
		for _, ev := range SSEStream(model, addr) {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}
	mux.HandleFunc("POST /v1/chat/completions", complete)
	mux.HandleFunc("POST /v1/completions", complete)
	return mux
}

// SSEStream is the streamed completion an endpoint answers, one string per
// event as the endpoint flushes it (the OpenAI chat.completion.chunk shape
// vLLM streams, ending in "data: [DONE]").
func SSEStream(model, addr string) []string {
	var out []string
	for i := range SSEEvents {
		out = append(out, fmt.Sprintf(`data: {"id":"c","object":"chat.completion.chunk","model":%q,"choices":[{"index":0,"delta":{"content":"t%d from %s"},"finish_reason":null}]}`+"\n\n", model, i, addr))
	}
	return append(out, "data: [DONE]\n\n")
}

// forward sends the request the gateway would send upstream to addr, with
// the headers the picker's mutation left, and returns the status and body.
func forward(addr, path string, headers [][2]string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	for _, h := range headers {
		if !strings.HasPrefix(h[0], ":") && h[0] != "content-length" && h[0] != "host" {
			req.Header.Add(h[0], h[1])
		}
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedBody))
	return resp.StatusCode, b, err
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
