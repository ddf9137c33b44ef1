// Package envoyharness plays Envoy's side of the ext_proc protocol against a
// real gRPC external processor, configured from the Envoy configuration it
// stands for (ParseConfig: a bootstrap, an Istio EnvoyFilter or Envoy
// Gateway policies; Shipped: the files in envoy/). It sends one HTTP
// request's messages in the order and shape Envoy's ext_proc filter does
// for that processing mode, enforces the rules Envoy enforces on the
// processor's replies, applies the mutations, chooses hosts as the
// configured cluster does (ORIGINAL_DST or override_host), and, as a
// Proxy, forwards requests over real HTTP with the route's retries across
// a health-checked cluster of ext_proc servers. It exists so kvgate's
// processor is tested against Envoy's contract without an Envoy binary;
// it is never more forgiving than Envoy (README.md lists each behaviour
// and its source).
//
// Sources: envoyproxy/envoy api/envoy/service/ext_proc/v3/external_processor.proto,
// api/envoy/extensions/filters/http/ext_proc/v3/{ext_proc,processing_mode}.proto,
// source/extensions/filters/http/ext_proc/, and the GIE endpoint-picker protocol
// (gateway-api-inference-extension docs/proposals/004-endpoint-picker-protocol).
package envoyharness

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Harness opens one ext_proc stream per HTTP request, as Envoy does.
type Harness struct {
	client extprocv3.ExternalProcessorClient
	cfg    Config
	rr     atomic.Uint64 // the worker cluster's round robin
}

// New checks cfg the way Envoy checks the filter config at load and
// returns a harness talking over conn.
func New(conn grpc.ClientConnInterface, cfg Config) (*Harness, error) {
	for _, m := range []filterv3.ProcessingMode_BodySendMode{cfg.RequestBodyMode, cfg.ResponseBodyMode} {
		switch m {
		case filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		case filterv3.ProcessingMode_STREAMED:
			if m == cfg.RequestBodyMode {
				return nil, fmt.Errorf("envoyharness: request body mode STREAMED is not implemented")
			}
		default:
			return nil, fmt.Errorf("envoyharness: body mode %s is not implemented", m)
		}
	}
	// Envoy rejects FULL_DUPLEX_STREAMED without trailer mode SEND
	// (ext_proc config.cc); fail-open is allowed and holds until the first
	// body chunk (ext_proc.cc failureModeAllow).
	if cfg.RequestBodyMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && !cfg.RequestTrailers {
		return nil, fmt.Errorf("envoyharness: FULL_DUPLEX_STREAMED request bodies need request trailer mode SEND")
	}
	if cfg.ResponseBodyMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && !cfg.ResponseTrailers {
		return nil, fmt.Errorf("envoyharness: FULL_DUPLEX_STREAMED response bodies need response trailer mode SEND")
	}
	if cfg.Route.Cluster.OriginalDst == nil && cfg.Route.Cluster.OverrideHost == nil && len(cfg.Route.Cluster.Hosts) == 0 {
		return nil, fmt.Errorf("envoyharness: cluster %q has no way to pick a host", cfg.Route.Cluster.Name)
	}
	if err := checkRequestAttributes(cfg); err != nil {
		return nil, err
	}
	if cfg.MessageTimeout <= 0 {
		cfg.MessageTimeout = 200 * time.Millisecond
	}
	if cfg.StatusOnError == 0 {
		cfg.StatusOnError = defaultStatusOnError
	}
	if cfg.BufferLimit <= 0 {
		cfg.BufferLimit = defaultBufferLimit
	}
	return &Harness{client: extprocv3.NewExternalProcessorClient(conn), cfg: cfg}, nil
}

// Config returns the harness's effective configuration.
func (h *Harness) Config() Config { return h.cfg }

// CancelPoint is where Start simulates the client going away (Envoy then
// tears the ext_proc stream down).
type CancelPoint int

const (
	NoCancel           CancelPoint = iota
	CancelAfterHeaders             // after sending request headers
	CancelMidBody                  // after sending half the body chunks (FULL_DUPLEX)
	CancelAfterBody                // after sending the whole body, before the replies
)

// Request is one downstream HTTP request.
type Request struct {
	Method    string // default GET
	Path      string // default /
	Authority string // default kvgate.test
	Scheme    string // default http
	Headers   []Header
	Body      []byte
	Trailers  []Header
	// ChunkSize cuts Body into request_body messages (FULL_DUPLEX); 0 means
	// 16 KiB, Envoy's usual read size.
	ChunkSize int
	// SubsetHint, when non-nil, goes to the processor as filter metadata
	// envoy.lb.subset_hint / x-gateway-destination-endpoint-subset.
	SubsetHint []string
	Cancel     CancelPoint
	// Source is the downstream peer of Envoy's connection (what Envoy's
	// source.address attribute evaluates to); DynamicMetadata is what
	// Envoy's own filters wrote before ext_proc (e.g. a set_metadata filter
	// on an operators' listener). See attributes.go.
	Source          string
	DynamicMetadata map[string]*structpb.Struct
}

// Forwarded is what Envoy would send upstream after the request path.
type Forwarded struct {
	Headers  []Header // pseudo-headers included
	Body     []byte
	Trailers []Header
	// Upstream is the host the cluster chose for the first attempt
	// (RouteErr: why it found none; Envoy answers 503).
	Upstream          string
	RouteErr          error
	RouteCacheCleared bool

	choice *hostChoice
	x      *Exchange
}

// NextUpstream makes the cluster's next host choice, as Envoy's router
// does for each retry: ORIGINAL_DST chooses the same host again,
// override_host the next listed host the cluster knows, then its fallback
// policy. With selected_host_key the choice is written to the request's
// metadata, where the processor sees it with the response.
func (f *Forwarded) NextUpstream() (string, error) {
	host, err := f.choice.next()
	if err == nil {
		if oh := f.choice.cluster.OverrideHost; oh != nil && oh.SelectedHostKey != nil {
			f.x.setMetadata(oh.SelectedHostKey, structpb.NewStringValue(host))
		}
	}
	return host, err
}

// Attempts is how many host choices were made.
func (f *Forwarded) Attempts() int { return f.choice.choices }

// LocalReply is a response Envoy generates itself.
type LocalReply struct {
	Status  int
	Headers []Header
	Body    []byte
	// Cause: "immediate_response", "message_timeout", "grpc_error",
	// "protocol_error", "mutation_error", "buffer_limit", "client_cancel".
	Cause string
	Err   error // the protocol violation or stream error behind it, if any
}

// Start runs the request path of one HTTP request through the processor
// and returns the exchange; exactly one of x.Forward and x.Local is set
// unless the request was cancelled (x.Local.Cause "client_cancel"). err is
// reserved for failures of the harness itself (the stream cannot open).
func (h *Harness) Start(ctx context.Context, req *Request) (*Exchange, error) {
	sctx, cancel := context.WithCancel(ctx)
	stream, err := h.client.Process(sctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("envoyharness: open ext_proc stream: %w", err)
	}
	x := newExchange(h, sctx, cancel, stream)
	x.runRequest(req)
	return x, nil
}
