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

	m := &extprocv3.ProcessingRequest{}
	addRequestContext(m, req, DefaultConfig())
	if m.Attributes != nil || m.MetadataContext != nil {
		t.Fatalf("a filter without request_attributes or forwarding_namespaces sent %v / %v", m.Attributes, m.MetadataContext)
	}

	cfg := DefaultConfig()
	cfg.RequestAttributes, cfg.ForwardingNamespaces = []string{"source.address"}, []string{"kvgate"}
	m = &extprocv3.ProcessingRequest{}
	addRequestContext(m, req, cfg)
	if got := m.Attributes["envoy.filters.http.ext_proc"].GetFields()["source.address"].GetStringValue(); got != "10.0.0.7:5000" {
		t.Fatalf("source.address = %q", got)
	}
	if len(m.MetadataContext.GetFilterMetadata()) != 1 || !m.MetadataContext.FilterMetadata["kvgate"].GetFields()["debug_header"].GetBoolValue() {
		t.Fatalf("forwarded metadata %v, want only the kvgate namespace", m.MetadataContext)
	}

	cfg.RequestAttributes = []string{"request.path"}
	if err := checkRequestAttributes(cfg); err == nil {
		t.Fatal("an attribute the harness does not evaluate was accepted")
	}
}
