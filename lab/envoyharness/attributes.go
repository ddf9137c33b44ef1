package envoyharness

import (
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// What Envoy tells the processor about a request besides its headers: the
// request attributes the filter lists, and the dynamic metadata of the
// namespaces it forwards. kvgate reads both to decide who may get debug
// output (extproc.debug_header).
//
//   - Config.RequestAttributes is the filter's request_attributes. The
//     harness evaluates "source.address" (Request.Source: the downstream
//     peer of Envoy's connection) and sends it with the request headers,
//     printed as a string in a Struct keyed by the attribute's name under
//     the filter's name, as ExpressionManager::evaluateAttributes does
//     (source/extensions/filters/http/ext_proc/matching_utils.cc). Other
//     attributes are not implemented and refused by New.
//   - Config.ForwardingNamespaces is
//     metadata_options.forwarding_namespaces.untyped: of the dynamic
//     metadata Envoy's own filters wrote before ext_proc
//     (Request.DynamicMetadata, e.g. a set_metadata filter), only these
//     namespaces reach the processor in metadata_context, with every
//     message (Filter::addDynamicMetadata in source/extensions/filters/http/ext_proc/ext_proc.cc).
const (
	attributeSource   = "source.address"
	extProcFilterName = "envoy.filters.http.ext_proc"
)

func checkRequestAttributes(cfg Config) error {
	for _, a := range cfg.RequestAttributes {
		if a != attributeSource {
			return fmt.Errorf("envoyharness: request attribute %q is not implemented (only %s)", a, attributeSource)
		}
	}
	return nil
}

// seedMetadata puts the dynamic metadata Envoy's own filters wrote before
// ext_proc into the request's metadata; like any other namespace, it
// reaches the processor only where forwarding_namespaces lists it
// (Exchange.forwardedMetadata, with every message).
func (x *Exchange) seedMetadata(req *Request) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for ns, md := range req.DynamicMetadata {
		x.metadata[ns] = proto.Clone(md).(*structpb.Struct)
	}
}

// withAttributes adds the filter's request attributes to the request
// headers message, the only message Envoy sends them with.
func (x *Exchange) withAttributes(m *extprocv3.ProcessingRequest, req *Request) *extprocv3.ProcessingRequest {
	for _, a := range x.cfg.RequestAttributes {
		// An attribute that does not evaluate is left out; source.address
		// always does on a TCP connection.
		if a == attributeSource && req.Source != "" {
			m.Attributes = map[string]*structpb.Struct{extProcFilterName: {Fields: map[string]*structpb.Value{a: structpb.NewStringValue(req.Source)}}}
		}
	}
	return m
}
