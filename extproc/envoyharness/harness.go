// Package envoyharness plays Envoy's side of the ext_proc protocol against a
// real gRPC external processor: it sends one HTTP request's messages in the
// order and shape Envoy's ext_proc filter does for the configured
// processing mode, enforces the rules Envoy enforces on the processor's
// replies, applies the mutations, routes like an ORIGINAL_DST cluster, and
// can forward the request over real HTTP (Gateway). It exists so kvgate's
// processor is tested against Envoy's contract without an Envoy binary.
//
// Sources: envoyproxy/envoy api/envoy/service/ext_proc/v3/external_processor.proto,
// api/envoy/extensions/filters/http/ext_proc/v3/{ext_proc,processing_mode}.proto,
// source/extensions/filters/http/ext_proc/, and the GIE endpoint-picker protocol
// (gateway-api-inference-extension docs/proposals/004-endpoint-picker-protocol).
package envoyharness

import (
	"context"
	"fmt"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Config is the part of Envoy's ext_proc filter and cluster configuration
// the harness honours.
type Config struct {
	RequestBodyMode  filterv3.ProcessingMode_BodySendMode
	ResponseBodyMode filterv3.ProcessingMode_BodySendMode
	// RequestTrailers and ResponseTrailers are trailer mode SEND.
	RequestTrailers  bool
	ResponseTrailers bool
	// MessageTimeout bounds each awaited reply outside FULL_DUPLEX_STREAMED
	// (Envoy default 200 ms); when it passes Envoy answers 504 unless
	// FailureModeAllow.
	MessageTimeout   time.Duration
	FailureModeAllow bool
	// StatusOnError is the local reply status for a gRPC error or protocol
	// violation (Envoy default 500).
	StatusOnError int
	// BufferLimit is the most a BUFFERED body may hold (Envoy answers 413
	// above it).
	BufferLimit int
	// ReceivingNamespaces lists the dynamic metadata namespaces accepted
	// from the processor (metadata_options.receiving_namespaces.untyped);
	// others are dropped.
	ReceivingNamespaces []string
	// RouteOnHeader routes on the x-gateway-destination-endpoint header
	// (ORIGINAL_DST use_http_header) instead of envoy.lb metadata.
	RouteOnHeader bool
	// RequestAttributes and ForwardingNamespaces: see attributes.go.
	RequestAttributes    []string
	ForwardingNamespaces []string
}

// DefaultConfig is the GIE reference configuration: full-duplex streamed
// bodies both ways, trailers sent, fail closed, routing on envoy.lb
// metadata.
func DefaultConfig() Config {
	return Config{
		RequestBodyMode:     filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode:    filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		RequestTrailers:     true,
		ResponseTrailers:    true,
		MessageTimeout:      200 * time.Millisecond,
		StatusOnError:       defaultStatusOnError,
		BufferLimit:         1 << 20,
		ReceivingNamespaces: []string{lbNamespace},
	}
}

// Harness opens one ext_proc stream per HTTP request, as Envoy does.
type Harness struct {
	client extprocv3.ExternalProcessorClient
	cfg    Config
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
	// Envoy rejects FULL_DUPLEX_STREAMED without trailer mode SEND or with
	// failure_mode_allow (processing_mode.proto).
	if cfg.RequestBodyMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && (!cfg.RequestTrailers || cfg.FailureModeAllow) {
		return nil, fmt.Errorf("envoyharness: FULL_DUPLEX_STREAMED request bodies need request trailer mode SEND and failure_mode_allow false")
	}
	if cfg.ResponseBodyMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && (!cfg.ResponseTrailers || cfg.FailureModeAllow) {
		return nil, fmt.Errorf("envoyharness: FULL_DUPLEX_STREAMED response bodies need response trailer mode SEND and failure_mode_allow false")
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
		cfg.BufferLimit = 1 << 20
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
	// Source and DynamicMetadata: see attributes.go.
	Source          string
	DynamicMetadata map[string]*structpb.Struct
}

// Forwarded is what Envoy would send upstream after the request path.
type Forwarded struct {
	Headers           []Header // pseudo-headers included
	Body              []byte
	Trailers          []Header
	Upstream          string   // ip:port chosen as ORIGINAL_DST would
	Fallbacks         []string // further hosts from the metadata list
	RouteErr          error    // why no upstream could be chosen (Envoy: 503)
	RouteCacheCleared bool
}

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
