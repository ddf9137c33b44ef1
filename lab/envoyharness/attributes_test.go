package envoyharness

import (
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestRequestContextFollowsTheFilterConfig(t *testing.T) {
	md := map[string]*structpb.Struct{
		"kvgate": {Fields: map[string]*structpb.Value{"debug_header": structpb.NewBoolValue(true)}},
		"other":  {Fields: map[string]*structpb.Value{"x": structpb.NewStringValue("y")}},
	}
	req := &Request{Source: "10.0.0.7:5000", DynamicMetadata: md}
	exchange := func(cfg Config) *Exchange {
		x := &Exchange{cfg: cfg, metadata: map[string]*structpb.Struct{}}
		x.seedMetadata(req)
		return x
	}

	// A filter that lists neither the attribute nor the kvgate namespace
	// (the shipped envoy.yaml lists source.address, issue 31 finding 2):
	// nothing of either reaches the processor.
	bare := DefaultConfig()
	if len(bare.RequestAttributes) != 1 || bare.RequestAttributes[0] != "source.address" {
		t.Fatalf("the shipped envoy.yaml's request_attributes = %v, want [source.address]", bare.RequestAttributes)
	}
	bare.RequestAttributes = nil
	x := exchange(bare)
	m := x.withAttributes(&extprocv3.ProcessingRequest{}, req)
	if m.Attributes != nil {
		t.Fatalf("a filter without request_attributes sent %v", m.Attributes)
	}
	if _, ok := x.forwardedMetadata().GetFilterMetadata()["kvgate"]; ok {
		t.Fatal("a namespace not in forwarding_namespaces was forwarded")
	}

	cfg := DefaultConfig()
	cfg.RequestAttributes, cfg.ForwardingNamespaces = []string{"source.address"}, []string{"kvgate"}
	x = exchange(cfg)
	m = x.withAttributes(&extprocv3.ProcessingRequest{}, req)
	if got := m.Attributes["envoy.filters.http.ext_proc"].GetFields()["source.address"].GetStringValue(); got != "10.0.0.7:5000" {
		t.Fatalf("source.address = %q", got)
	}
	fwd := x.forwardedMetadata()
	if len(fwd.GetFilterMetadata()) != 1 || !fwd.FilterMetadata["kvgate"].GetFields()["debug_header"].GetBoolValue() {
		t.Fatalf("forwarded metadata %v, want only the kvgate namespace", fwd)
	}

	cfg.RequestAttributes = []string{"request.path"}
	if err := checkRequestAttributes(cfg); err == nil {
		t.Fatal("an attribute the harness does not evaluate was accepted")
	}
}
