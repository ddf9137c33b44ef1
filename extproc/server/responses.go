package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/extproc/openai"
)

// MaxStreamedChunk bounds each re-emitted body chunk. GIE's EPP uses 62000
// bytes because some Envoy builds cap a streamed chunk at 64 KiB
// (gateway-api-inference-extension pkg/common/envoy BodyByteLimit).
const MaxStreamedChunk = 62000

// validateDecision checks what the decider returned before it reaches Envoy:
// Envoy routes only to literal addresses (ORIGINAL_DST parses one ip:port
// with parseInternetAddressAndPortNoThrow; override_host looks hosts up by
// address string) and rejects header names or values with invalid
// characters (ext_proc mutation_utils.cc applyHeaderMutations).
func validateDecision(d *Decision, eps *endpointSpellings) error {
	if d == nil {
		return fmt.Errorf("decider returned neither a decision nor an error")
	}
	if _, err := eps.canonical(d.Endpoint); err != nil {
		return fmt.Errorf("decision endpoint: %w", err)
	}
	for i, f := range d.Fallbacks {
		if _, err := eps.canonical(f); err != nil {
			return fmt.Errorf("decision fallback %d: %w", i, err)
		}
	}
	if d.Prefiller != "" {
		if _, err := eps.canonical(d.Prefiller); err != nil {
			return fmt.Errorf("decision prefiller: %w", err)
		}
	}
	if !validHeaderValue(d.DebugHeader) {
		return fmt.Errorf("decision debug header has a value with CR, LF or NUL")
	}
	return nil
}

// validHeaderName follows RFC 9110 §5.6.2 token characters.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func validHeaderValue(s string) bool {
	return !strings.ContainsAny(s, "\r\n\x00")
}

func setHeader(name, value string) *corev3.HeaderValueOption {
	// raw_value only: with send_header_raw_value Envoy reads raw_value and
	// rejects a mutation that sets both (mutation_utils.cc). append_action is
	// left at its zero value, which Envoy treats as "append unset → overwrite".
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: name, RawValue: []byte(value)}}
}

// routingMutation removes every client routing header and sets the
// decision's. Envoy applies remove_headers before set_headers
// (mutation_utils.cc), so the remove list may name the headers set.
func routingMutation(spoofed []string, d *Decision) *extprocv3.HeaderMutation {
	remove := []string{HeaderDestination, HeaderPrefiller}
	for _, s := range spoofed {
		if !contains(remove, s) {
			remove = append(remove, s)
		}
	}
	// The header carries the same value as the metadata: the GIE protocol
	// forbids two different values, and override_host may read either.
	set := []*corev3.HeaderValueOption{setHeader(HeaderDestination, destinationValue(d))}
	if d.Prefiller != "" {
		// The llm-d routing sidecar beside the decode worker reads this header
		// and writes each leg's body itself (llm-d-routing-sidecar,
		// internal/proxy/connector_nixlv2.go, runNIXLProtocolV2: the prefill
		// request gets kv_transfer_params {do_remote_decode: true}, stream
		// false, max_tokens 1; the decode request the prefiller's answered
		// kv_transfer_params), so the body leaves kvgate as the client sent it.
		set = append(set, setHeader(HeaderPrefiller, d.Prefiller))
	}
	return &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove}
}

// stripMutation removes client routing headers without routing (BUFFERED
// headers response, before the body decides the route).
func stripMutation(spoofed []string) *extprocv3.HeaderMutation {
	remove := []string{HeaderDestination, HeaderPrefiller}
	for _, s := range spoofed {
		if !contains(remove, s) {
			remove = append(remove, s)
		}
	}
	return &extprocv3.HeaderMutation{RemoveHeaders: remove}
}

// destinationValue is the routing value: primary first, then fallbacks,
// comma-separated (GIE endpoint-picker protocol). override_host splits it
// on ',' (load_balancer.cc getSelectedHosts); with SingleDestination it is
// the primary alone, the one ip:port ORIGINAL_DST can parse.
func destinationValue(d *Decision) string {
	if len(d.Fallbacks) == 0 {
		return d.Endpoint
	}
	return d.Endpoint + "," + strings.Join(d.Fallbacks, ",")
}

// destinationMetadata is the envoy.lb namespace the proxy routes on.
func destinationMetadata(d *Decision) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			MetadataDestination: structpb.NewStringValue(destinationValue(d)),
		}}),
	}}
}

func requestHeadersResponse(c *extprocv3.CommonResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: c}},
		DynamicMetadata: md,
	}
}

func requestBodyResponse(c *extprocv3.CommonResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}},
		DynamicMetadata: md,
	}
}

func streamedChunk(body []byte, eos bool) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos}},
	}}
}

// appendChunks splits body into pieces of at most MaxStreamedChunk bytes;
// an empty body is one empty piece, so an end_of_stream still has a carrier.
func appendChunks(dst [][]byte, body []byte) [][]byte {
	if len(body) == 0 {
		return append(dst, body)
	}
	for len(body) > MaxStreamedChunk {
		dst = append(dst, body[:MaxStreamedChunk])
		body = body[MaxStreamedChunk:]
	}
	return append(dst, body)
}

// immediateResponse builds the local reply Envoy sends instead of
// forwarding. The status must be a defined envoy.type.v3.StatusCode (the
// proto's validation rule); anything else becomes 500.
func immediateResponse(status int, body []byte, headers map[string]string, details string) *extprocv3.ProcessingResponse {
	if _, ok := typev3.StatusCode_name[int32(status)]; !ok || status < 200 {
		status = http.StatusInternalServerError
	}
	if body == nil {
		body = errorFor(status, http.StatusText(status)).JSON()
	}
	set := []*corev3.HeaderValueOption{setHeader(headerContentType, "application/json")}
	names := make([]string, 0, len(headers))
	for k := range headers {
		k2 := strings.ToLower(k)
		if k2 == headerContentType || !validHeaderName(k) || !validHeaderValue(headers[k]) {
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		set = append(set, setHeader(strings.ToLower(k), headers[k]))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: set},
		Body:    body,
		Details: details,
	}}}
}

// errorJSON renders an OpenAI-shaped error for a status kvgate itself
// decides, for a reply sent before the request's :path is known (the
// stream limit, the header limits).
func errorJSON(status int, message string) []byte {
	return errorFor(status, message).JSON()
}

// errorFor is the error kvgate answers a status it decides itself with;
// the stream renders it in its route's shape (streamState.errorJSON).
func errorFor(status int, message string) *openai.Error {
	e := &openai.Error{Status: status, Message: message, Type: "invalid_request_error"}
	switch {
	case status == http.StatusRequestEntityTooLarge:
		e.Code = "request_too_large"
	case status == http.StatusRequestHeaderFieldsTooLarge:
		e.Code = "request_header_fields_too_large"
	case status == http.StatusTooManyRequests:
		e.Code = "rate_limit_exceeded"
	case status == http.StatusRequestTimeout:
		e.Code = "request_timeout"
	case status >= 500:
		e.Type = "server_error"
	}
	return e
}
