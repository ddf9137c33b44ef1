package envoyharness

import (
	"errors"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

func destMD(v *structpb.Value) map[string]*structpb.Struct {
	return map[string]*structpb.Struct{"envoy.lb": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint": v}}}
}

func choices(t *testing.T, c Cluster, md map[string]*structpb.Struct, hs []Header, n int) ([]string, error) {
	t.Helper()
	h := &hostChoice{cluster: c, md: md, headers: hs, rr: new(atomic.Uint64)}
	var out []string
	for range n {
		host, err := h.next()
		if err != nil {
			return out, err
		}
		out = append(out, host)
	}
	return out, nil
}

// ORIGINAL_DST (original_dst_cluster.cc chooseHost, metadataOverrideHost,
// requestOverrideHost) takes ONE ip:port and chooses it again on every
// retry; a list, a host name or a number yields no host (503).
func TestOriginalDstTakesOneEndpoint(t *testing.T) {
	meta := Cluster{Name: "odst", OriginalDst: &OriginalDst{MetadataKey: &MetadataKey{Namespace: "envoy.lb", Path: []string{"x-gateway-destination-endpoint"}}}}
	got, err := choices(t, meta, destMD(structpb.NewStringValue("10.0.0.1:80")), nil, 3)
	if err != nil || len(got) != 3 || got[0] != "10.0.0.1:80" || got[2] != "10.0.0.1:80" {
		t.Errorf("single endpoint: %v %v", got, err)
	}
	for name, v := range map[string]*structpb.Value{
		"list":           structpb.NewStringValue("10.0.0.1:80,10.0.0.2:80"),
		"hostname":       structpb.NewStringValue("pod:80"),
		"number":         structpb.NewNumberValue(1),
		"no_port":        structpb.NewStringValue("10.0.0.1"),
		"v4_in_brackets": structpb.NewStringValue("[10.0.0.1]:80"),
	} {
		if _, err := choices(t, meta, destMD(v), nil, 1); !errors.Is(err, errNoHost) {
			t.Errorf("%s: %v, want no host", name, err)
		}
	}
	// A list value yields its first element (metadataOverrideHost).
	lv, _ := structpb.NewList([]any{"10.0.0.3:80", "10.0.0.4:80"})
	if got, err := choices(t, meta, destMD(structpb.NewListValue(lv)), nil, 1); err != nil || got[0] != "10.0.0.3:80" {
		t.Errorf("list value: %v %v", got, err)
	}
	// IPv6 is printed as Envoy's asString does.
	if got, err := choices(t, meta, destMD(structpb.NewStringValue("[0:0:0:0:0:0:0:1]:80")), nil, 1); err != nil || got[0] != "[::1]:80" {
		t.Errorf("v6: %v %v", got, err)
	}
	hdr := Cluster{Name: "odst", OriginalDst: &OriginalDst{Header: "x-gateway-destination-endpoint"}}
	if _, err := choices(t, meta, nil, []Header{{"x-gateway-destination-endpoint", "10.0.0.1:80"}}, 1); !errors.Is(err, errNoHost) {
		t.Error("metadata routing used the header")
	}
	got, err = choices(t, hdr, nil, []Header{{"x-gateway-destination-endpoint", "10.0.0.1:80"}, {"x-gateway-destination-endpoint", "10.0.0.2:80"}}, 1)
	if err != nil || got[0] != "10.0.0.1:80" {
		t.Errorf("header: first value only: %v %v", got, err)
	}
	if _, err := choices(t, hdr, nil, []Header{{"x-gateway-destination-endpoint", "10.0.0.1:80,10.0.0.2:80"}}, 1); !errors.Is(err, errNoHost) {
		t.Error("comma list in the header accepted")
	}
}

// override_host (load_balancer.cc getSelectedHosts, getEndpoint, findHost)
// splits on ',', strips whitespace, consumes one listed host per choice,
// skips hosts the cluster does not know (exact string), then falls back.
func TestOverrideHostWalksTheList(t *testing.T) {
	c := Cluster{Name: "w", Hosts: []string{"10.0.0.1:80", "10.0.0.2:80", "[fd00::3]:80"},
		OverrideHost: &OverrideHost{Sources: []HostSource{{Metadata: &MetadataKey{Namespace: "envoy.lb", Path: []string{"x-gateway-destination-endpoint"}}}}}}
	got, err := choices(t, c, destMD(structpb.NewStringValue("10.0.0.2:80, 10.0.0.9:80 ,,[fd00::3]:80")), nil, 4)
	if err != nil || got[0] != "10.0.0.2:80" || got[1] != "[fd00::3]:80" {
		t.Fatalf("walk: %v %v", got, err)
	}
	// The list exhausted, the fallback policy picks among the cluster's hosts.
	if got[2] != "10.0.0.1:80" || got[3] != "10.0.0.2:80" {
		t.Errorf("fallback picks %v", got[2:])
	}
	// Exact lookup: a spelling the cluster does not use misses.
	got, _ = choices(t, c, destMD(structpb.NewStringValue("[fd00:0::3]:80")), nil, 1)
	if got[0] == "[fd00::3]:80" {
		// the fallback could pick it by chance only as its first host, which is 10.0.0.1:80
		t.Errorf("non-canonical spelling matched: %v", got)
	}
	// A non-string metadata value is ignored: fallback.
	got, _ = choices(t, c, destMD(structpb.NewNumberValue(3)), nil, 1)
	if got[0] != "10.0.0.1:80" {
		t.Errorf("non-string value: %v", got)
	}
}
