package envoyharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// ProxyOptions supply what the Envoy configuration names but a test (or
// a development gateway) provides: the kvgate replicas and the workers.
type ProxyOptions struct {
	// ExtProc replaces the ext_proc cluster's endpoints (ip:port each), or
	// ExtProcConns gives ready connections (one per replica). One of them
	// is required unless the config lists literal addresses.
	ExtProc      []string
	ExtProcConns []grpc.ClientConnInterface
	// DialOptions are used to dial ExtProc (default: plaintext).
	DialOptions []grpc.DialOption
	// Workers replaces the worker cluster's endpoints, as EDS or a headless
	// Service would deliver them (ignored by ORIGINAL_DST).
	Workers []string
	// Client reaches the workers; nil: a dedicated transport without
	// proxies or compression.
	Client *http.Client
	// ChunkSize cuts request bodies into request_body messages (default
	// 16 KiB, Envoy's usual read size).
	ChunkSize int
	// MaxRequestBytes bounds what the proxy reads from a client (default
	// 64 MiB; 413 above it).
	MaxRequestBytes int64
	// ServedByHeader, when set, names a response header the proxy sets to
	// the upstream host (ip:port) that answered: a development aid of
	// kvgate-lab's gateway, not something Envoy does (the e2e tests, which
	// play Envoy, leave it unset). It is set after the processor has seen
	// the response headers, so kvgate can neither see nor remove it, and is
	// absent from replies the proxy makes up itself (no upstream answered).
	ServedByHeader string
	Logger         *slog.Logger
}

// Proxy is an http.Handler that does for each client request what the
// configured Envoy does: the request path through a kvgate replica, the
// host choice from its answer, a real HTTP request to that host with the
// route's retries, and the response streamed back through the processor.
// A client that goes away cancels the exchange. It is the base of a
// development gateway: Load(envoyYAML, options).
type Proxy struct {
	cfg   Config
	opts  ProxyOptions
	hosts []*extProcHost
	rr    atomic.Uint64
	// retries in flight on the ext_proc cluster (its max_retries breaker)
	retries atomic.Int64
	client  *http.Client
	log     *slog.Logger
	stop    context.CancelFunc
	wg      sync.WaitGroup
	owned   []*grpc.ClientConn
}

// extProcHost is one kvgate replica in the ext_proc cluster.
type extProcHost struct {
	addr    string
	h       *Harness
	conn    grpc.ClientConnInterface
	healthy atomic.Bool

	mu           sync.Mutex
	failures     int       // consecutive connection failures
	ejections    int       // times ejected
	ejectedUntil time.Time // outlier detection
}

// NewProxy starts a Proxy for cfg: it connects to the ext_proc replicas
// and, if the cluster has a gRPC health check, runs it as Envoy does.
func NewProxy(cfg Config, opts ProxyOptions) (*Proxy, error) {
	if len(opts.Workers) > 0 {
		cfg = cfg.WithWorkers(opts.Workers...)
	}
	p := &Proxy{cfg: cfg, opts: opts, client: opts.Client, log: opts.Logger}
	if p.client == nil {
		p.client = &http.Client{Transport: defaultTransport}
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	conns := opts.ExtProcConns
	addrs := opts.ExtProc
	if len(conns) == 0 && len(addrs) == 0 {
		addrs = cfg.ExtProc.Hosts
	}
	dial := opts.DialOptions
	if dial == nil {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// Envoy's connection pool connects when a stream needs a connection;
	// grpc-go instead backs off after a failed connect (up to minutes) and
	// fails new streams fast meanwhile, even once the host is back. A 10 ms
	// backoff keeps it to Envoy's behaviour.
	dial = append(slices.Clip(dial), grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}, MinConnectTimeout: time.Second}))
	for i, a := range addrs {
		cc, err := grpc.NewClient(a, dial...)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("envoyharness: ext_proc host %d %s: %w", i, a, err)
		}
		p.owned = append(p.owned, cc)
		conns = append(conns, cc)
	}
	if len(conns) == 0 {
		return nil, fmt.Errorf("envoyharness: ext_proc cluster %s has no hosts", cfg.ExtProc.Name)
	}
	for i, c := range conns {
		h, err := New(c, cfg)
		if err != nil {
			p.Close()
			return nil, err
		}
		addr := fmt.Sprintf("host%d", i)
		if i < len(addrs) && len(opts.ExtProcConns) == 0 {
			addr = addrs[i]
		}
		host := &extProcHost{addr: addr, h: h, conn: c}
		// With an active health check a host is unhealthy until its first
		// check passes (Envoy adds it with FAILED_ACTIVE_HC |
		// PENDING_ACTIVE_HC); without one it is healthy.
		host.healthy.Store(cfg.ExtProc.HealthCheck == nil)
		p.hosts = append(p.hosts, host)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	if hc := cfg.ExtProc.HealthCheck; hc != nil {
		for _, host := range p.hosts {
			p.wg.Add(1)
			go p.healthCheck(ctx, host, hc)
		}
	}
	return p, nil
}

// Close stops the health checks and closes the connections it dialled.
func (p *Proxy) Close() error {
	if p.stop != nil {
		p.stop()
	}
	p.wg.Wait()
	for _, c := range p.owned {
		c.Close()
	}
	return nil
}

// Config is the configuration the proxy plays.
func (p *Proxy) Config() Config { return p.cfg }

// Healthy reports which ext_proc hosts the health check passes now.
func (p *Proxy) Healthy() []bool {
	out := make([]bool, len(p.hosts))
	for i, h := range p.hosts {
		out[i] = h.healthy.Load()
	}
	return out
}

// WaitHealthy waits until every ext_proc host has passed its health check
// (or ctx ends).
func (p *Proxy) WaitHealthy(ctx context.Context) error {
	for {
		if !slices.Contains(p.Healthy(), false) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("envoyharness: ext_proc hosts healthy: %v: %w", p.Healthy(), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// healthCheck is Envoy's gRPC active health check
// (source/extensions/health_checkers/grpc): Check(service_name) every
// interval; SERVING passes, anything else or a timeout fails; a host turns
// unhealthy after unhealthy_threshold failures in a row and healthy after
// healthy_threshold passes.
func (p *Proxy) healthCheck(ctx context.Context, host *extProcHost, hc *HealthCheck) {
	defer p.wg.Done()
	client := healthpb.NewHealthClient(host.conn)
	interval := max(hc.Interval, 10*time.Millisecond)
	passes, fails := 0, 0
	for {
		cctx, cancel := context.WithTimeout(ctx, max(hc.Timeout, 10*time.Millisecond))
		resp, err := client.Check(cctx, &healthpb.HealthCheckRequest{Service: hc.Service})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			passes, fails = passes+1, 0
			if passes >= max(hc.Healthy, 1) {
				host.healthy.Store(true)
			}
		} else {
			fails, passes = fails+1, 0
			if fails >= max(hc.Unhealthy, 1) {
				host.healthy.Store(false)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// pick chooses the ext_proc host for a new stream: round robin over the
// healthy hosts that outlier detection has not ejected, or over all of
// them in panic mode (fewer than half usable: healthy_panic_threshold's
// default 50 %). A retry with the previous_hosts predicate re-picks up to
// host_selection_retry_max_attempts times while the choice is a host this
// request already tried, then takes the last choice
// (source/common/router/router.cc, the retry's chooseHost consulting
// RetryState::shouldSelectAnotherHost).
func (p *Proxy) pick(tried map[*extProcHost]bool, tries int) *extProcHost {
	var healthy []*extProcHost
	now := time.Now()
	for _, h := range p.hosts {
		h.mu.Lock()
		ejected := now.Before(h.ejectedUntil)
		h.mu.Unlock()
		if h.healthy.Load() && !ejected {
			healthy = append(healthy, h)
		}
	}
	pool := healthy
	if 2*len(healthy) < len(p.hosts) {
		pool = p.hosts
	}
	host := pool[(p.rr.Add(1)-1)%uint64(len(pool))]
	for i := 0; i < tries && tried[host]; i++ {
		host = pool[(p.rr.Add(1)-1)%uint64(len(pool))]
	}
	return host
}

// Start runs one request's request path on the next ext_proc host,
// retrying as the ext_proc filter's grpc_service.retry_policy allows
// (StreamRetry): a stream that could not open, or ended with no reply, is
// replayed on another host, up to num_retries times, after Envoy's
// jittered back-off, while the cluster's retry circuit breaker has room.
// A stream that got any reply is never retried (the router retries only
// before the response starts).
func (p *Proxy) Start(ctx context.Context, req *Request) (*Exchange, error) {
	r := p.cfg.ExtProc.Retry
	var tried map[*extProcHost]bool
	selectTries := 0
	if r != nil && r.PreviousHosts {
		tried, selectTries = map[*extProcHost]bool{}, r.HostSelectTries
	}
	held := false // a place under the retry breaker, until the retried attempt's outcome
	release := func() {
		if held {
			p.retries.Add(-1)
			held = false
		}
	}
	for attempt := 0; ; attempt++ {
		host := p.pick(tried, selectTries)
		x, err := host.h.Start(ctx, req)
		failure := p.observe(host, x, err)
		release()
		if failure == "" || r == nil || !r.covers(failure) || attempt >= r.NumRetries || ctx.Err() != nil {
			return x, err
		}
		if !p.retrySlot() {
			return x, err // circuit breaker: upstream_rq_retry_overflow
		}
		held = true
		if x != nil {
			x.Cancel()
		}
		if tried != nil {
			tried[host] = true
		}
		select {
		case <-ctx.Done():
			release()
			return x, err
		case <-time.After(r.backOff(attempt)):
		}
	}
}

// retrySlot takes a place under the retry circuit breaker (max_retries:
// retries in flight at once; Envoy's default 3). Start holds the place
// from scheduling the retry until the retried attempt's outcome, as Envoy
// holds the cluster's retries resource (source/common/router/
// retry_state_impl.cc: shouldRetry refuses with upstream_rq_retry_overflow
// when retries().canCreate() is false, else takes it with retries().inc()
// before enableBackoffTimer; resetRetry, at the next retry decision or
// when the request ends, gives it back).
func (p *Proxy) retrySlot() bool {
	limit := int64(p.cfg.ExtProc.MaxRetries)
	if limit <= 0 {
		limit = 3
	}
	if p.retries.Add(1) > limit {
		p.retries.Add(-1)
		return false
	}
	return true
}

// covers reports whether a failure is one of the policy's retry_on
// conditions (source/common/router/retry_state_impl.cc
// wouldRetryFromReset: "reset" and "5xx" take any reset, connect failures
// included; "connect-failure" only a failed connection; "refused-stream"
// a stream refused by the host, which is how a stream open fails on a
// draining host's GOAWAY).
func (r *StreamRetry) covers(failure string) bool {
	if r.On["reset"] || r.On["5xx"] {
		return true
	}
	switch failure {
	case failureConnect:
		return r.On["connect-failure"] || r.On["refused-stream"]
	}
	return false
}

// backOff is the wait before retry n (0-based): Envoy's
// JitteredExponentialBackOffStrategy, a random time below
// base × 2^n, at most max_interval (source/common/common/backoff_strategy.cc).
func (r *StreamRetry) backOff(n int) time.Duration {
	ceiling := r.BaseInterval << min(n, 30)
	if ceiling <= 0 || ceiling > r.MaxInterval {
		ceiling = r.MaxInterval
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling)))
}

// Failures the ext_proc client sees before any reply.
const (
	failureConnect = "connect-failure" // the stream could not open (Envoy: the pool's connect failed)
	failureReset   = "reset"           // it opened but ended with UNAVAILABLE and no reply
)

// observe feeds outlier detection and names the failure, if any, before
// any reply. A stream that could not open (grpc-go refuses it while the
// connection is down: Envoy's pool failing to connect reports
// LocalOriginConnectFailed, source/common/conn_pool/conn_pool_base.cc) or
// failed with UNAVAILABLE before any reply is a local-origin failure;
// any reply is a success. Ejection lasts base_ejection_time × the times
// ejected, and takes no more than max_ejection_percent of the hosts, but
// always at least one (outlier_detection.proto max_ejection_percent).
func (p *Proxy) observe(host *extProcHost, x *Exchange, startErr error) string {
	failure := ""
	switch {
	case startErr != nil:
		failure = failureConnect
	case x.Local != nil && x.Local.Cause == "grpc_error" && StatusCode(x.Local.Err) == codes.Unavailable && len(x.Trace()) == 0:
		failure = failureReset
	}
	od := p.cfg.ExtProc.Outlier
	if od == nil || od.Consecutive <= 0 {
		return failure
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if failure == "" {
		host.failures = 0
		return failure
	}
	host.failures++
	if host.failures < od.Consecutive {
		return failure
	}
	ejected := 0
	now := time.Now()
	for _, h := range p.hosts {
		if h != host {
			h.mu.Lock()
			if now.Before(h.ejectedUntil) {
				ejected++
			}
			h.mu.Unlock()
		}
	}
	if ejected > 0 && (ejected+1)*100 > od.MaxEjectionPercent*len(p.hosts) {
		return failure
	}
	host.ejections++
	host.failures = 0
	host.ejectedUntil = now.Add(od.BaseEjection * time.Duration(host.ejections))
	return failure
}

var defaultTransport = &http.Transport{
	Proxy:               nil,
	DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	DisableCompression:  true,
	MaxIdleConnsPerHost: 64,
}

// hopByHop headers are the connection's, not the request's (RFC 9110 §7.6.1).
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true,
	"transfer-encoding": true, "upgrade": true, "trailer": true,
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The request target as the client sent it, normalised as the HTTP
	// connection manager would before any filter runs (pathnorm.go):
	// conn_manager_impl.cc answers 400 to a path normalisation refuses
	// and 307 (Location: the new path) after unescaping slashes under
	// UNESCAPE_AND_REDIRECT.
	path, action := p.cfg.Path.apply(r.RequestURI)
	switch action {
	case pathReject:
		writeLocal(w, &LocalReply{Status: http.StatusBadRequest, Body: []byte("Bad Request")})
		return
	case pathRedirect:
		writeLocal(w, &LocalReply{Status: http.StatusTemporaryRedirect, Headers: []Header{{Name: "location", Value: path}}})
		return
	}
	limit := p.opts.MaxRequestBytes
	if limit <= 0 {
		limit = 64 << 20
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return // client gone
	}
	if int64(len(body)) > limit {
		writeLocal(w, &LocalReply{Status: http.StatusRequestEntityTooLarge, Body: []byte("Payload Too Large")})
		return
	}
	// Source: the connection's peer, what Envoy's source.address is.
	req := &Request{Method: r.Method, Path: path, Authority: r.Host, Scheme: "http", Body: body, ChunkSize: p.opts.ChunkSize, Source: r.RemoteAddr}
	for name, vs := range r.Header {
		n := strings.ToLower(name)
		if hopByHop[n] || n == "host" {
			continue
		}
		for _, v := range vs {
			req.Headers = append(req.Headers, Header{n, v})
		}
	}
	for name, vs := range r.Trailer {
		for _, v := range vs {
			req.Trailers = append(req.Trailers, Header{strings.ToLower(name), v})
		}
	}

	x, err := p.Start(ctx, req)
	if err != nil {
		p.log.Error("envoyharness proxy: ext_proc unreachable", "err", err)
		writeLocal(w, &LocalReply{Status: p.cfg.StatusOnError, Body: []byte("ext_proc unavailable")})
		return
	}
	defer x.Cancel()
	if x.Local != nil {
		if x.Local.Cause != "client_cancel" {
			writeLocal(w, x.Local)
		}
		return
	}
	f := x.Forward
	if f.RouteErr != nil {
		p.log.Warn("envoyharness proxy: no upstream", "err", f.RouteErr)
		writeLocal(w, &LocalReply{Status: http.StatusServiceUnavailable, Body: []byte("no healthy upstream")})
		return
	}
	if pre, ok := Get(f.Headers, prefillerHeader); ok && pre != "" {
		body, err := p.prefillFirst(ctx, p.client, f, pre)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("envoyharness proxy: prefill leg failed", "err", err)
			writeLocal(w, &LocalReply{Status: http.StatusBadGateway, Body: []byte(err.Error())})
			return
		}
		f = withBody(f, body)
	}
	sent := time.Now()
	resp, servedBy, err := p.forward(ctx, f)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		p.log.Warn("envoyharness proxy: upstream failed", "err", err)
		// Envoy's router answers locally, and the local reply passes the
		// encoder filters, ext_proc included: the processor sees a 503
		// without x-envoy-upstream-service-time.
		resp = localResponse(http.StatusServiceUnavailable, "upstream connect error or disconnect/reset before headers")
	} else {
		// Envoy's router stamps upstream responses with this header; its
		// own local replies never carry it.
		resp.Header.Set("x-envoy-upstream-service-time", strconv.FormatInt(time.Since(sent).Milliseconds(), 10))
	}
	defer resp.Body.Close()

	var rh []Header
	for name, vs := range resp.Header {
		n := strings.ToLower(name)
		if hopByHop[n] || n == "content-length" {
			// The processor may re-chunk the body; the length is the
			// writer's business.
			continue
		}
		for _, v := range vs {
			rh = append(rh, Header{n, v})
		}
	}
	noBody := r.Method == http.MethodHead || resp.ContentLength == 0 && len(resp.Trailer) == 0
	out, err := x.RespondHeaders(resp.StatusCode, rh, noBody)
	if err != nil {
		p.log.Warn("envoyharness proxy: response headers", "err", err)
		writeLocal(w, &LocalReply{Status: p.cfg.StatusOnError, Body: []byte("ext_proc error on response headers")})
		return
	}
	code := resp.StatusCode
	for _, h := range out {
		if h.Name == ":status" {
			if n, err := strconv.Atoi(h.Value); err == nil {
				code = n
			}
			continue
		}
		if strings.HasPrefix(h.Name, ":") {
			continue
		}
		w.Header().Add(h.Name, h.Value)
	}
	if p.opts.ServedByHeader != "" && servedBy != "" {
		w.Header().Set(p.opts.ServedByHeader, servedBy)
	}
	w.WriteHeader(code)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}

	upErr := make(chan error, 1)
	if !noBody {
		go func() { upErr <- p.pumpUpstream(x, resp) }()
	} else {
		upErr <- nil
	}
	for {
		data, end, err := x.Downstream(ctx)
		if err != nil {
			return // processor or client failure: the client sees a reset body
		}
		if len(data) > 0 {
			if _, err := w.Write(data); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if end {
			break
		}
	}
	if err := <-upErr; err != nil {
		return
	}
	closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := x.Close(closeCtx); err != nil {
		p.log.Warn("envoyharness proxy: closing ext_proc stream", "err", err)
	}
}

// pumpUpstream feeds the upstream body into the response path as it
// arrives, so streamed (SSE) responses flow chunk by chunk.
func (p *Proxy) pumpUpstream(x *Exchange, resp *http.Response) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if serr := x.RespondBody(buf[:n], false); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			var tr []Header
			for name, vs := range resp.Trailer {
				for _, v := range vs {
					tr = append(tr, Header{strings.ToLower(name), v})
				}
			}
			if len(tr) > 0 {
				_, terr := x.RespondTrailers(tr)
				return terr
			}
			return x.RespondBody(nil, true)
		}
		if err != nil {
			x.Cancel()
			return fmt.Errorf("upstream body: %w", err)
		}
	}
}

// attemptFailure is why one upstream attempt produced no usable response.
type attemptFailure int

const (
	attemptOK            attemptFailure = iota
	attemptConnectFailed                // connection refused or timed out
	attemptReset                        // the connection broke before response headers
)

// forward sends the processed request to the chosen host and retries as
// the route's retry policy says (router.cc / retry_state_impl.cc: each
// retry re-runs the cluster's host choice). Without a retry policy there
// is one attempt. A retriable status consumes an attempt; the last
// attempt's response is the answer, with the host that gave it.
func (p *Proxy) forward(ctx context.Context, f *Forwarded) (*http.Response, string, error) {
	method, _ := Get(f.Headers, ":method")
	if cl, ok := Get(f.Headers, "content-length"); ok && cl != strconv.Itoa(len(f.Body)) {
		return nil, "", fmt.Errorf("content-length %s does not match the %d-byte body the processor left", cl, len(f.Body))
	}
	retries := 0
	if rp := p.cfg.Route.Retry; rp != nil {
		retries = rp.NumRetries
	}
	host := f.Upstream
	var lastErr error
	for attempt := 0; ; attempt++ {
		resp, failure, err := p.attempt(ctx, f, method, host)
		if ctx.Err() != nil {
			if resp != nil {
				resp.Body.Close()
			}
			return nil, "", ctx.Err()
		}
		if attempt >= retries || !p.retriable(failure, resp) {
			if err != nil {
				return nil, "", fmt.Errorf("upstream %s: %w", host, err)
			}
			return resp, host, nil
		}
		if resp != nil {
			resp.Body.Close()
		}
		lastErr = err
		next, cerr := f.NextUpstream()
		if cerr != nil {
			return nil, "", fmt.Errorf("retry: %w (after %v)", cerr, lastErr)
		}
		host = next
	}
}

// retriable applies the route's retry_on conditions (router.proto
// x-envoy-retry-on values) to one attempt's result.
func (p *Proxy) retriable(failure attemptFailure, resp *http.Response) bool {
	rp := p.cfg.Route.Retry
	if rp == nil {
		return false
	}
	for _, on := range rp.On {
		switch on {
		case "connect-failure":
			if failure == attemptConnectFailed {
				return true
			}
		case "reset", "reset-before-request":
			if failure == attemptReset {
				return true
			}
		case "5xx":
			if failure != attemptOK || resp.StatusCode >= 500 {
				return true
			}
		case "gateway-error":
			if failure != attemptOK || resp.StatusCode == 502 || resp.StatusCode == 503 || resp.StatusCode == 504 {
				return true
			}
		case "retriable-status-codes":
			if failure == attemptOK && slices.Contains(rp.RetriableStatusCodes, resp.StatusCode) {
				return true
			}
		}
	}
	return false
}

// attempt sends one upstream request to host.
func (p *Proxy) attempt(ctx context.Context, f *Forwarded, method, host string) (*http.Response, attemptFailure, error) {
	path, _ := Get(f.Headers, ":path")
	authority, _ := Get(f.Headers, ":authority")
	for pooled := 0; ; pooled++ {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+host+path, strings.NewReader(string(f.Body)))
		if err != nil {
			return nil, attemptConnectFailed, fmt.Errorf("build upstream request: %w", err)
		}
		req.Host = authority
		for _, h := range f.Headers {
			if strings.HasPrefix(h.Name, ":") || hopByHop[h.Name] || h.Name == "content-length" {
				continue
			}
			req.Header.Add(h.Name, h.Value)
		}
		req.ContentLength = int64(len(f.Body))
		var reused atomic.Bool
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused.Store(i.Reused) },
		}))
		resp, err := p.client.Do(req)
		if err == nil {
			return resp, attemptOK, nil
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, attemptConnectFailed, err
		}
		if reused.Load() && pooled == 0 {
			// A pooled connection the upstream had closed (its process
			// died): Envoy's pool sees the close on the idle connection and
			// connects afresh, so this is no attempt of the request's own.
			continue
		}
		return nil, attemptReset, err
	}
}

// localResponse is a reply the proxy makes up itself.
func localResponse(status int, body string) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"text/plain"}},
		ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
}

func writeLocal(w http.ResponseWriter, l *LocalReply) {
	for _, h := range l.Headers {
		if !strings.HasPrefix(h.Name, ":") {
			w.Header().Add(h.Name, h.Value)
		}
	}
	if w.Header().Get("content-type") == "" {
		w.Header().Set("content-type", "text/plain")
	}
	status := l.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	w.WriteHeader(status)
	_, _ = w.Write(l.Body)
}
