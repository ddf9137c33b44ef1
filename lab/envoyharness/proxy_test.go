package envoyharness_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/logbuffer"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

const hangGuard = 20 * time.Second

type gwTicket struct {
	firstBytes, finishes atomic.Int32
	outcome              atomic.Int32
	served               atomic.Value
	done                 chan struct{}
	once                 sync.Once
}

func (t *gwTicket) FirstByte()       { t.firstBytes.Add(1) }
func (t *gwTicket) Served(ep string) { t.served.Store(ep) }
func (t *gwTicket) Finish(o server.Outcome) {
	t.outcome.Store(int32(o))
	t.finishes.Add(1)
	t.once.Do(func() { close(t.done) })
}

func (t *gwTicket) wait(tb testing.TB) {
	tb.Helper()
	select {
	case <-t.done:
	case <-time.After(hangGuard):
		tb.Fatal("Finish never called")
	}
}

type deciderFunc func(ctx context.Context, req *server.Request) (*server.Decision, *server.RouteError)

func (f deciderFunc) Decide(ctx context.Context, req *server.Request) (*server.Decision, *server.RouteError) {
	return f(ctx, req)
}

// gateway wires a real kvgate ext_proc server and a Proxy playing the
// shipped Envoy config envoyFile, with workers as its worker cluster's
// endpoints, listening on loopback.
func gateway(t *testing.T, r server.Decider, envoyFile string, workers ...string) string {
	t.Helper()
	return gatewayWith(t, r, envoyFile, "", workers...)
}

// gatewayWith is gateway with the proxy's ServedByHeader option.
func gatewayWith(t *testing.T, r server.Decider, envoyFile, servedBy string, workers ...string) string {
	t.Helper()
	cfg := envoyharness.MustShipped(envoyFile)
	srv, err := server.New(r, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		SingleDestination: cfg.Route.Cluster.OriginalDst != nil})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServing()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	p, err := envoyharness.NewProxy(cfg, envoyharness.ProxyOptions{ExtProc: []string{lis.Addr().String()}, Workers: workers,
		ChunkSize: 64, ServedByHeader: servedBy, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(p)
	t.Cleanup(func() {
		gw.Close()
		p.Close()
		g.Stop()
	})
	return gw.URL
}

func hostPort(t *testing.T, url string) string {
	return strings.TrimPrefix(url, "http://")
}

// TestGatewayStreamsSSEThroughProcessor: each event reaches the client
// before the backend writes the next, so nothing buffers the stream.
func TestGatewayStreamsSSEThroughProcessor(t *testing.T) {
	next := make(chan struct{})
	var gotDest, gotBody atomic.Value
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody.Store(string(b))
		gotDest.Store(r.Header.Get("x-gateway-destination-endpoint"))
		w.Header().Set("content-type", "text/event-stream")
		w.WriteHeader(200)
		for i, ev := range []string{"data: one\n\n", "data: two\n\n", "data: [DONE]\n\n"} {
			if i > 0 {
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}))
	defer backend.Close()
	ep := hostPort(t, backend.URL)
	tk := &gwTicket{done: make(chan struct{})}
	var routed atomic.Value
	url := gateway(t, deciderFunc(func(_ context.Context, req *server.Request) (*server.Decision, *server.RouteError) {
		routed.Store(string(req.Body))
		return &server.Decision{Endpoint: ep, Ticket: tk}, nil
	}), "envoy.yaml", ep)

	reqBody := `{"model":"m","prompt":"` + strings.Repeat("p", 500) + `","stream":true}`
	req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(reqBody))
	req.Header.Set("x-gateway-destination-endpoint", "6.6.6.6:66")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("content-type") != "text/event-stream" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	rd := bufio.NewReader(resp.Body)
	var events []string
	for len(events) < 3 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("after %v: %v", events, err)
		}
		if strings.HasPrefix(line, "data: ") {
			events = append(events, strings.TrimSpace(line))
			if len(events) < 3 {
				next <- struct{}{}
			}
		}
	}
	if events[0] != "data: one" || events[2] != "data: [DONE]" {
		t.Errorf("events %v", events)
	}
	if rest, _ := io.ReadAll(rd); strings.TrimSpace(string(rest)) != "" {
		t.Errorf("trailing bytes %q", rest)
	}
	tk.wait(t)
	if gotDest.Load() != ep || gotBody.Load() != reqBody || routed.Load() != reqBody {
		t.Errorf("backend saw destination %v body match %v; router body match %v", gotDest.Load(), gotBody.Load() == reqBody, routed.Load() == reqBody)
	}
	if tk.finishes.Load() != 1 || server.Outcome(tk.outcome.Load()) != server.OutcomeOK || tk.firstBytes.Load() != 1 || tk.served.Load() != ep {
		t.Errorf("ticket: finishes %d outcome %v firstBytes %d served %v", tk.finishes.Load(), server.Outcome(tk.outcome.Load()), tk.firstBytes.Load(), tk.served.Load())
	}
}

// With envoy.yaml (override_host, a retry policy on connect-failure and
// selected_host_key) a dead primary is skipped for the fallback, and the
// processor learns which host served. With envoy-original-dst.yaml the
// request fails (503) and nothing is reported: ORIGINAL_DST has one host
// and no selected_host_key.
func TestGatewayFallbackPerConfig(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer backend.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	live := hostPort(t, backend.URL)
	for _, c := range []struct {
		file       string
		wantStatus int
		wantServed any
	}{
		{"envoy.yaml", 200, live},
		{"envoy-original-dst.yaml", 503, nil},
	} {
		tk := &gwTicket{done: make(chan struct{})}
		url := gateway(t, deciderFunc(func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
			return &server.Decision{Endpoint: deadAddr, Fallbacks: []string{live}, Ticket: tk}, nil
		}), c.file, deadAddr, live)
		resp, err := http.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.wantStatus || (c.wantStatus == 200 && string(b) != "ok") {
			t.Fatalf("%s: %d %q", c.file, resp.StatusCode, b)
		}
		tk.wait(t)
		if tk.served.Load() != c.wantServed {
			t.Errorf("%s: served %v, want %v", c.file, tk.served.Load(), c.wantServed)
		}
	}
}

// ServedByHeader names the host that answered: the fallback after the
// primary's connect failure, not kvgate's first choice; a reply the proxy
// makes up itself (no upstream answered) carries none, and without the
// option (as Envoy) no response does.
func TestGatewayServedByHeader(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer backend.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	live := hostPort(t, backend.URL)
	for _, c := range []struct {
		name, header, file string
		fallbacks          []string
		wantStatus         int
		want               []string
	}{
		{"fallback served", "x-kvgate-served-by", "envoy.yaml", []string{live}, 200, []string{live}},
		{"no upstream answered", "x-kvgate-served-by", "envoy-original-dst.yaml", nil, 503, nil},
		{"option unset", "", "envoy.yaml", []string{live}, 200, nil},
	} {
		tk := &gwTicket{done: make(chan struct{})}
		url := gatewayWith(t, deciderFunc(func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
			return &server.Decision{Endpoint: deadAddr, Fallbacks: c.fallbacks, Ticket: tk}, nil
		}), c.file, c.header, deadAddr, live)
		resp, err := http.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		tk.wait(t)
		if resp.StatusCode != c.wantStatus {
			t.Fatalf("%s: status %d", c.name, resp.StatusCode)
		}
		if got := resp.Header.Values("x-kvgate-served-by"); !slices.Equal(got, c.want) {
			t.Errorf("%s: x-kvgate-served-by %q, want %q", c.name, got, c.want)
		}
	}
}

func TestGatewayClientDisconnectFinishesTicket(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer backend.Close()
	tk := &gwTicket{done: make(chan struct{})}
	url := gateway(t, deciderFunc(func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
		return &server.Decision{Endpoint: hostPort(t, backend.URL), Ticket: tk}, nil
	}), "envoy.yaml", hostPort(t, backend.URL))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(`{"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("%q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	tk.wait(t)
	if tk.finishes.Load() != 1 || server.Outcome(tk.outcome.Load()) != server.OutcomeClientCancel || tk.firstBytes.Load() != 1 {
		t.Errorf("finishes %d outcome %v firstBytes %d", tk.finishes.Load(), server.Outcome(tk.outcome.Load()), tk.firstBytes.Load())
	}
}

func TestGatewayRouteErrorReachesClient(t *testing.T) {
	url := gateway(t, deciderFunc(func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
		return nil, &server.RouteError{Status: 429, Body: []byte(`{"error":{"message":"busy"}}`)}
	}), "envoy.yaml", "127.0.0.1:1")
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("content-type") != "application/json" || string(b) != `{"error":{"message":"busy"}}` {
		t.Fatalf("%d %v %q", resp.StatusCode, resp.Header, b)
	}
}

type statusTicket struct {
	gwTicket
	status   atomic.Int32
	upstream atomic.Bool
}

func (t *statusTicket) ResponseStatus(status int, fromUpstream bool) {
	t.status.Store(int32(status))
	t.upstream.Store(fromUpstream)
}

// As Envoy does, an upstream's response reaches the processor stamped with
// x-envoy-upstream-service-time, and the proxy's own 503 for an upstream
// it could not reach passes the processor too, without it: that is how
// passive outlier detection tells a worker's 503 from a dead worker.
func TestGatewayReportsUpstreamAndLocalStatuses(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "overloaded")
	}))
	defer backend.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	for _, c := range []struct {
		name     string
		endpoint string
		upstream bool
		served   string
	}{
		{"upstream 503", hostPort(t, backend.URL), true, hostPort(t, backend.URL)},
		{"connect failure", deadAddr, false, deadAddr},
	} {
		tk := &statusTicket{gwTicket: gwTicket{done: make(chan struct{})}}
		url := gateway(t, deciderFunc(func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
			return &server.Decision{Endpoint: c.endpoint, Ticket: tk}, nil
		}), "envoy.yaml", c.endpoint)
		resp, err := http.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s: status %d", c.name, resp.StatusCode)
		}
		tk.wait(t)
		if tk.status.Load() != 503 || tk.upstream.Load() != c.upstream || tk.served.Load() != c.served {
			t.Errorf("%s: processor saw status %d fromUpstream %v served %v; want 503 %v %s", c.name, tk.status.Load(), tk.upstream.Load(), tk.served.Load(), c.upstream, c.served)
		}
		if server.Outcome(tk.outcome.Load()) != server.OutcomeUpstreamError {
			t.Errorf("%s: outcome %v", c.name, server.Outcome(tk.outcome.Load()))
		}
	}
}

// Issue 31, finding 5: one of two ext_proc replicas dies without a drain
// (its listener gone: every connection refused, as after kill -9). With
// envoy.yaml's grpc_service.retry_policy (connect-failure, reset; the
// previous_hosts predicate) and outlier detection, every request that
// starts after the death is served through the other replica: a stream
// that cannot open on the dead one is opened again on the live one. The
// same gateway without the retry policy (Envoy with only outlier
// detection) fails the request whose stream met the dead replica first.
func TestGatewayFailsOverADeadExtProcReplica(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(backend.Close)
	worker := hostPort(t, backend.URL)
	decider := deciderFunc(func(ctx context.Context, req *server.Request) (*server.Decision, *server.RouteError) {
		return &server.Decision{Endpoint: worker, Ticket: &gwTicket{done: make(chan struct{})}}, nil
	})
	for _, c := range []struct {
		name  string
		retry bool
	}{{"with the shipped retry policy", true}, {"without a retry policy", false}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := envoyharness.MustShipped("envoy.yaml")
			if cfg.ExtProc.Retry == nil || !cfg.ExtProc.Retry.PreviousHosts || cfg.ExtProc.MaxRetries < 1000 {
				t.Fatalf("envoy.yaml's ext_proc retry policy %+v, max_retries %d", cfg.ExtProc.Retry, cfg.ExtProc.MaxRetries)
			}
			if !c.retry {
				cfg.ExtProc.Retry = nil
			}
			var addrs []string
			var servers []*grpc.Server
			for range 2 {
				srv, err := server.New(decider, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					t.Fatal(err)
				}
				srv.SetServing()
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				g := grpc.NewServer()
				srv.Register(g)
				go func() { _ = g.Serve(lis) }()
				t.Cleanup(g.Stop)
				addrs, servers = append(addrs, lis.Addr().String()), append(servers, g)
			}
			p, err := envoyharness.NewProxy(cfg, envoyharness.ProxyOptions{ExtProc: addrs, Workers: []string{worker},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			if err := p.WaitHealthy(ctx); err != nil {
				t.Fatal(err)
			}
			gw := httptest.NewServer(p)
			t.Cleanup(gw.Close)
			post := func() int {
				resp, err := http.Post(gw.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode
			}
			for range 4 {
				if s := post(); s != http.StatusOK {
					t.Fatalf("before the death: status %d", s)
				}
			}
			servers[0].Stop() // its listener closes: connections refused from now on
			var failed []int
			for i := range 40 {
				if s := post(); s != http.StatusOK {
					failed = append(failed, i)
				}
			}
			switch {
			case c.retry && len(failed) != 0:
				t.Errorf("requests %v failed after the replica died; the retry policy should have moved them to the live one", failed)
			case !c.retry && (len(failed) == 0 && p.Healthy()[0] || len(failed) > 1):
				// Without retries the first stream sent to the dead replica
				// fails and ejects it (unless the health check got there
				// first); no later one fails.
				t.Errorf("without retries: requests %v failed (health %v), want exactly the first stream on the dead replica", failed, p.Healthy())
			}
		})
	}
}

// Issue 31, finding 7: override_host without selected_host_key (Envoy
// accepts it; GIE-generated gateway configs may lack it). kvgate still
// routes: the dead primary is skipped for the fallback, the client gets
// the fallback's answer. What it cannot account (which host served) it
// counts per response and says once in its log.
func TestGatewayWithoutServedHostReportRoutesAndSaysSo(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer backend.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	live := hostPort(t, backend.URL)

	cfg := envoyharness.MustShipped("envoy.yaml")
	cfg.Route.Cluster.OverrideHost.SelectedHostKey = nil // as validate-envoy's warning describes
	var logs logbuffer.Buffer
	var tickets []*gwTicket
	var mu sync.Mutex
	srv, err := server.New(deciderFunc(func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
		tk := &gwTicket{done: make(chan struct{})}
		mu.Lock()
		tickets = append(tickets, tk)
		mu.Unlock()
		return &server.Decision{Endpoint: deadAddr, Fallbacks: []string{live}, Ticket: tk}, nil
	}), server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServing()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	p, err := envoyharness.NewProxy(cfg, envoyharness.ProxyOptions{ExtProc: []string{lis.Addr().String()}, Workers: []string{deadAddr, live},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(p)
	t.Cleanup(gw.Close)
	for i := range 2 {
		resp, err := http.Get(gw.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("request %d: %d %q, want the fallback's 200", i, resp.StatusCode, b)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, tk := range tickets {
		tk.wait(t)
		if tk.served.Load() != nil {
			t.Errorf("ticket %d: served %v reported, with no selected_host_key", i, tk.served.Load())
		}
	}
	if n := srv.Stats().ServedUnreported; n != 2 {
		t.Errorf("ServedUnreported = %d, want 2", n)
	}
	if n := strings.Count(logs.String(), "Envoy reports no served host"); n != 1 {
		t.Errorf("%d log lines about the missing report, want exactly 1:\n%s", n, logs.String())
	}
}
