package envoyharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Gateway is an http.Handler that does for each client request what Envoy
// with the ext_proc filter and an ORIGINAL_DST cluster does: the request
// path through the processor, the upstream choice from its answer, a real
// HTTP request to that ip:port (walking fallbacks on connect failure), and
// the response streamed back through the processor's response path. A
// client that goes away cancels the exchange.
type Gateway struct {
	Harness *Harness
	// Replicas, when set, replaces Harness: each request's stream goes to
	// the next processor in turn, as Envoy spreads ext_proc streams over
	// the hosts of a processor cluster with several replicas.
	Replicas []*Harness
	next     atomic.Uint64
	// Client reaches the upstreams; nil uses a dedicated transport without
	// proxies or compression.
	Client *http.Client
	// ChunkSize cuts request bodies into request_body messages (default
	// 16 KiB).
	ChunkSize int
	// MaxRequestBytes bounds what the gateway reads from a client
	// (default 64 MiB; 413 above it).
	MaxRequestBytes int64
	Logger          *slog.Logger
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

func (g *Gateway) logger() *slog.Logger {
	if g.Logger != nil {
		return g.Logger
	}
	return slog.Default()
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	limit := g.MaxRequestBytes
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
	req := &Request{Method: r.Method, Path: r.URL.RequestURI(), Authority: r.Host, Scheme: "http", Body: body, ChunkSize: g.ChunkSize, Source: r.RemoteAddr}
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

	h := g.Harness
	if len(g.Replicas) > 0 {
		h = g.Replicas[(g.next.Add(1)-1)%uint64(len(g.Replicas))]
	}
	x, err := h.Start(ctx, req)
	if err != nil {
		g.logger().Error("envoyharness gateway: ext_proc unreachable", "err", err)
		writeLocal(w, &LocalReply{Status: h.cfg.StatusOnError, Body: []byte("ext_proc unavailable")})
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
		// ORIGINAL_DST without a usable host.
		g.logger().Warn("envoyharness gateway: no upstream", "err", f.RouteErr)
		writeLocal(w, &LocalReply{Status: http.StatusServiceUnavailable, Body: []byte("no healthy upstream")})
		return
	}
	client := g.Client
	if client == nil {
		client = &http.Client{Transport: defaultTransport}
	}
	if pre, ok := Get(f.Headers, prefillerHeader); ok && pre != "" {
		body, err := g.prefillFirst(ctx, client, f, pre)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			g.logger().Warn("envoyharness gateway: prefill leg failed", "err", err)
			writeLocal(w, &LocalReply{Status: http.StatusBadGateway, Body: []byte(err.Error())})
			return
		}
		f = withBody(f, body)
	}
	sent := time.Now()
	resp, served, err := g.forward(ctx, client, f)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		g.logger().Warn("envoyharness gateway: upstream failed", "err", err)
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
	out, err := x.RespondHeaders(resp.StatusCode, rh, noBody, served)
	if err != nil {
		g.logger().Warn("envoyharness gateway: response headers", "err", err)
		writeLocal(w, &LocalReply{Status: h.cfg.StatusOnError, Body: []byte("ext_proc error on response headers")})
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
	w.WriteHeader(code)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}

	upErr := make(chan error, 1)
	if !noBody {
		go func() { upErr <- g.pumpUpstream(x, resp) }()
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
		g.logger().Warn("envoyharness gateway: closing ext_proc stream", "err", err)
	}
}

// pumpUpstream feeds the upstream body into the response path as it
// arrives, so streamed (SSE) responses flow chunk by chunk.
func (g *Gateway) pumpUpstream(x *Exchange, resp *http.Response) error {
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

// forward sends the processed request to the chosen upstream, then to each
// fallback in turn while connecting fails (override_host retry walk).
// On failure the last endpoint tried is returned with the error.
func (g *Gateway) forward(ctx context.Context, client *http.Client, f *Forwarded) (*http.Response, string, error) {
	method, _ := Get(f.Headers, ":method")
	path, _ := Get(f.Headers, ":path")
	authority, _ := Get(f.Headers, ":authority")
	if cl, ok := Get(f.Headers, "content-length"); ok && cl != strconv.Itoa(len(f.Body)) {
		return nil, "", fmt.Errorf("content-length %s does not match the %d-byte body the processor left", cl, len(f.Body))
	}
	var lastErr error
	tried := ""
	for _, ep := range append([]string{f.Upstream}, f.Fallbacks...) {
		tried = ep
		req, err := http.NewRequestWithContext(ctx, method, "http://"+ep+path, strings.NewReader(string(f.Body)))
		if err != nil {
			return nil, "", fmt.Errorf("build upstream request: %w", err)
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
		resp, err := client.Do(req)
		if err == nil {
			return resp, ep, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		var op *net.OpError
		// A connect failure is retried on the next host (retry_on
		// connect-failure). So is a failure on a pooled connection the
		// upstream had closed (its process died): Envoy sees the close
		// on its idle connection and connects afresh, which then fails
		// to connect — the same retry, reached one step later.
		if !(errors.As(err, &op) && op.Op == "dial") && !reused.Load() {
			break
		}
	}
	return nil, tried, fmt.Errorf("upstream: %w", lastErr)
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
