package envoyharness

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Every shipped config parses into what the harness plays, with the
// routing, reporting and stripping each file promises.
func TestShippedConfigsParse(t *testing.T) {
	type want struct {
		odst, selected, retry, respHeaders bool
		reqMode                            filterv3.ProcessingMode_BodySendMode
		hc                                 bool
	}
	wants := map[string]want{
		"envoy.yaml":                         {selected: true, retry: true, respHeaders: true, reqMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, hc: true},
		"envoy-mtls.yaml":                    {selected: true, retry: true, respHeaders: true, reqMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, hc: true},
		"envoy-buffered-failopen.yaml":       {retry: true, reqMode: filterv3.ProcessingMode_BUFFERED, hc: true},
		"envoy-original-dst.yaml":            {odst: true, respHeaders: true, reqMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, hc: true},
		"envoy-header-routing.yaml":          {odst: true, respHeaders: true, reqMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, hc: true},
		"istio/envoyfilter.yaml":             {odst: true, respHeaders: true, reqMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, hc: true},
		"envoy-gateway/extensionpolicy.yaml": {odst: true, respHeaders: true, reqMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, hc: true},
	}
	for _, name := range shippedFiles(t) {
		if name == "istio/destinationrule.yaml" {
			continue // TLS only: no filter or route of its own
		}
		w, ok := wants[name]
		if !ok {
			t.Errorf("%s: shipped but not covered here", name)
			continue
		}
		c, err := Shipped(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		oh := c.Route.Cluster.OverrideHost
		got := want{odst: c.Route.Cluster.OriginalDst != nil, selected: oh != nil && oh.SelectedHostKey != nil, retry: c.Route.Retry != nil,
			respHeaders: c.ResponseHeaders, reqMode: c.RequestBodyMode, hc: c.ExtProc.HealthCheck != nil}
		if got != w {
			t.Errorf("%s: %+v, want %+v", name, got, w)
		}
		stripped := stripHeaders([]Header{{"x-kvgate-debug", "1"}, {"x-gateway-destination-endpoint", "6.6.6.6:1"}, {"x-prefiller-host-port", "6.6.6.6:2"}, {"accept", "*/*"}}, c.StripHeaders)
		if len(stripped) != 1 || stripped[0].Name != "accept" {
			t.Errorf("%s: client headers reaching ext_proc: %v", name, stripped)
		}
		if !contains(c.ForwardingNamespaces, "envoy.lb.subset_hint") {
			t.Errorf("%s: envoy.lb.subset_hint not forwarded (%v)", name, c.ForwardingNamespaces)
		}
		// Only envoy-mtls.yaml dials kvgate with TLS (its transport_socket);
		// no shipped file speaks TLS to the workers.
		if c.ExtProc.TLS != (name == "envoy-mtls.yaml") || c.Route.Cluster.TLS {
			t.Errorf("%s: ext_proc cluster TLS %v, worker cluster TLS %v", name, c.ExtProc.TLS, c.Route.Cluster.TLS)
		}
	}
}

// shippedFiles lists the YAML files in the repository's envoy/ folder: what
// users are told to deploy. Each must also be embedded (envoy.Shipped, which
// the test reads), so a file the embed pattern misses fails the test.
func shippedFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..", "envoy")
	var names []string
	err := fs.WalkDir(os.DirFS(root), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Ext(path) == ".yaml" {
			names = append(names, path)
		}
		return nil
	})
	if err != nil || len(names) == 0 {
		t.Fatalf("listing %s: %v (%d files)", root, err, len(names))
	}
	sort.Strings(names)
	return names
}

// onGrpcClose: a processor closing cleanly (status OK) without a reply lets
// the request continue unprocessed, even with failure_mode_allow false.
func TestCleanCloseContinuesUnprocessed(t *testing.T) {
	_, conn := startScripted(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		_, err := s.Recv()
		return err
	})
	cfg := DefaultConfig().WithWorkers("10.0.0.1:80")
	x := run(t, conn, cfg, &Request{Method: "GET"})
	if x.Local != nil || x.Forward == nil || x.Forward.Upstream != "10.0.0.1:80" {
		t.Fatalf("local %+v forward %+v", x.Local, x.Forward)
	}
}

// A gRPC error fails the request closed (status_on_error) or, with
// failure_mode_allow, lets it through, but in FULL_DUPLEX_STREAMED only
// until a body chunk was sent (ext_proc.cc failureModeAllow).
func TestFailOpenHoldsUntilTheFirstBodyChunk(t *testing.T) {
	fail := func(afterBody bool) func(extprocv3.ExternalProcessor_ProcessServer) error {
		return func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if afterBody {
				if err := drainUntil(s, isBodyEnd); err != nil {
					return err
				}
			} else if _, err := s.Recv(); err != nil {
				return err
			}
			return context.DeadlineExceeded // a gRPC error (Unknown)
		}
	}
	cfg := DefaultConfig().WithWorkers("10.0.0.1:80")
	cfg.FailureModeAllow = true
	_, conn := startScripted(t, fail(false))
	if x := run(t, conn, cfg, &Request{Method: "GET"}); x.Forward == nil {
		t.Errorf("headers only, fail open: %+v", x.Local)
	}
	_, conn = startScripted(t, fail(true))
	if x := run(t, conn, cfg, &Request{Method: "POST", Body: []byte("{}")}); x.Local == nil || x.Local.Status != 500 {
		t.Errorf("after a body chunk, fail open no longer holds: %+v %+v", x.Local, x.Forward)
	}
}

// Full duplex: Envoy removes content-length once the headers went to the
// processor (decodeHeaders, shouldRemoveContentLength), and ignores the
// processor setting it.
func TestFullDuplexStripsContentLength(t *testing.T) {
	p, conn := startScripted(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if err := drainUntil(s, isBodyEnd); err != nil {
			return err
		}
		r := headersReply(&extprocv3.HeaderMutation{SetHeaders: setHeaders("content-length", "2")})
		r.DynamicMetadata = routeMetadata("envoy.lb", "10.0.0.1:80")
		if err := s.Send(r); err != nil {
			return err
		}
		if err := s.Send(streamedReply([]byte("{}"), true)); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	})
	x := run(t, conn, DefaultConfig().WithWorkers("10.0.0.1:80"), &Request{Method: "POST", Body: []byte("{}"), Headers: []Header{{"content-length", "2"}}})
	if x.Forward == nil {
		t.Fatalf("local %+v", x.Local)
	}
	if v, ok := Get(x.Forward.Headers, "content-length"); ok {
		t.Errorf("content-length %q survived in full duplex", v)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sawLength := false
	for _, h := range p.seen[0].GetRequestHeaders().GetHeaders().GetHeaders() {
		sawLength = sawLength || h.GetKey() == "content-length"
	}
	if !sawLength {
		t.Error("the processor did not see the client's content-length (Envoy removes it only after sending the headers)")
	}
}

// With the response path sending nothing, Envoy closes the stream at the
// response headers without sending them (encodeHeaders, noExternalProcess).
func TestResponseSkipClosesAtResponseHeaders(t *testing.T) {
	done := make(chan int, 1)
	_, conn := startScripted(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		n := 0
		for {
			m, err := s.Recv()
			if err != nil {
				done <- n
				return nil
			}
			n++
			switch m.GetRequest().(type) {
			case *extprocv3.ProcessingRequest_RequestHeaders:
				if err := s.Send(headersReply(nil)); err != nil {
					return err
				}
			case *extprocv3.ProcessingRequest_RequestBody:
				r := plainBodyReply()
				r.DynamicMetadata = routeMetadata("envoy.lb", "10.0.0.1:80")
				if err := s.Send(r); err != nil {
					return err
				}
			}
		}
	})
	cfg := MustShipped("envoy-buffered-failopen.yaml").WithWorkers("10.0.0.1:80")
	cfg.MessageTimeout = hangGuard
	x := run(t, conn, cfg, &Request{Method: "POST", Body: []byte("{}")})
	if x.Forward == nil || x.Forward.Upstream != "10.0.0.1:80" {
		t.Fatalf("local %+v forward %+v", x.Local, x.Forward)
	}
	if _, err := x.RespondHeaders(200, nil, false); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-done:
		if n != 2 {
			t.Errorf("processor saw %d messages, want request headers and body only", n)
		}
	case <-time.After(hangGuard):
		t.Fatal("stream not closed at the response headers")
	}
}

func setHeaders(kv ...string) []*corev3.HeaderValueOption {
	var out []*corev3.HeaderValueOption
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])}})
	}
	return out
}
