package envoysource_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/envoy"
	"github.com/kvgate/kvgate/extproc/envoyaddr"
	"github.com/kvgate/kvgate/extproc/server"
)

// Endpoint spellings kvgate may meet in a config or from a router.
var endpointCases = []string{
	"10.0.0.1:80", "10.0.0.1:080", "010.0.0.1:80", "10.0.0.256:80", "10.0.0.1:65535", "10.0.0.1:65536", "10.0.0.1:", "10.0.0.1",
	"[::1]:80", "[0:0:0:0:0:0:0:1]:80", "[::ffff:10.0.0.1]:80", "[::10.0.0.1]:80", "[::0.0.1.2]:80", "[FD00::B]:80",
	"[fd00:0:0:0:0:0:0:b]:80", "[2001:db8:0:0:1:0:0:1]:80", "[2001:db8::]:80", "[::]:80", "[1:2:3:4:5:6:7:8]:80",
	"[::1]", "::1:80", "[10.0.0.1]:80", "localhost:80", "pod.ns.svc:8000", "10.0.0.1:80,10.0.0.2:80",
	" 10.0.0.1:80", "10.0.0.1: 80", "10.0.0.1:+80", "[fe80::1%eth0]:80", "[1:2:3:4:5:6:7:8:9]:80", "[::1::2]:80",
}

// Whatever kvgate accepts as an endpoint, Envoy parses as the same
// address, and kvgate's spelling is the one in Envoy's host map
// (asString), so override_host's exact lookup finds it. What Envoy cannot
// parse, kvgate refuses (at config load, naming the key).
func TestEndpointsAgreeWithEnvoy(t *testing.T) {
	for _, s := range endpointCases {
		envoy, envoyOK := parseInternetAddressAndPortNoThrow(s)
		got, err := envoyaddr.Canonical(s)
		if !envoyOK && err == nil {
			t.Errorf("%q: Envoy cannot parse it, kvgate accepts it as %q", s, got)
			continue
		}
		_, cfgErr := config.Parse(strings.NewReader("models: [{name: m, block_size: 4}]\nengines: [{endpoint: '" + s + "', model: m}]"))
		if (err == nil) != (cfgErr == nil) {
			t.Errorf("%q: envoyaddr says %v, config says %v", s, err, cfgErr)
		}
		if cfgErr != nil && !strings.Contains(cfgErr.Error(), "engines[0].endpoint") {
			t.Errorf("%q: config error %v does not name the key", s, cfgErr)
		}
		if err != nil {
			continue
		}
		if envoy.port == 0 {
			t.Errorf("%q: port 0 accepted", s)
		}
		if want := envoy.asString(); got != want {
			t.Errorf("%q: kvgate sends %q, Envoy's host map holds %q", s, got, want)
		}
		again, ok := parseInternetAddressAndPortNoThrow(got)
		if !ok || again.asString() != got {
			t.Errorf("%q: kvgate's %q is not a fixed point of Envoy's parse and print", s, got)
		}
	}
}

// kvgate's ext_proc server, read by a bare gRPC client (no harness): the
// header and the metadata carry one value; with SingleDestination it is
// one ip:port ORIGINAL_DST parses (metadataOverrideHost); otherwise
// override_host's split of it is exactly the primary and the fallbacks,
// each found in a host map keyed as Envoy keys it.
func TestRoutingValueAgreesWithEnvoy(t *testing.T) {
	primary, fallbacks := "[0:0:0:0:0:0:0:1]:8000", []string{"10.0.0.2:8000", "[FD00::3]:8000"}
	hostMap := map[string]bool{}
	for _, h := range append([]string{primary}, fallbacks...) {
		a, ok := parseInternetAddressAndPortNoThrow(h)
		if !ok {
			t.Fatalf("%q does not parse", h)
		}
		hostMap[a.asString()] = true
	}
	for _, single := range []bool{true, false} {
		value, header := routeOnce(t, server.Config{SingleDestination: single}, &server.Decision{Endpoint: primary, Fallbacks: fallbacks})
		if value != header {
			t.Errorf("single=%v: metadata %q, header %q: GIE forbids two values", single, value, header)
		}
		if single {
			a, ok := parseInternetAddressAndPortNoThrow(value)
			if !ok || !hostMap[a.asString()] || a.asString() != "[::1]:8000" {
				t.Errorf("ORIGINAL_DST cannot route %q", value)
			}
			continue
		}
		sel := overrideHostSelected(value)
		if len(sel) != 3 || sel[0] != "[::1]:8000" || sel[1] != "10.0.0.2:8000" || sel[2] != "[fd00::3]:8000" {
			t.Errorf("override_host reads %q as %v", value, sel)
		}
		for _, h := range sel {
			if !hostMap[h] {
				t.Errorf("override_host's findHost misses %q", h)
			}
		}
	}
}

type oneDecision struct{ d *server.Decision }

func (o oneDecision) Decide(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
	cp := *o.d
	return &cp, nil
}

// routeOnce sends a header-only request (end_of_stream on the headers) to
// a real server and returns the routing metadata value and header value
// of its reply.
func routeOnce(t *testing.T, cfg server.Config, d *server.Decision) (value, header string) {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(oneDecision{d}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/models")}}}
	if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hs, EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	value = r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			header = string(h.GetHeader().GetRawValue())
		}
	}
	return value, header
}

// startupRefusal transcribes the start-up checks the cases below hit:
// OriginalDstClusterFactory::createClusterImpl (http_header_name without
// use_http_header), ext_proc config.cc (FULL_DUPLEX_STREAMED needs trailer
// SEND; fail-open allowed since envoyproxy/envoy#41276), and what makes
// Envoy never apply kvgate's answers: observability_mode
// (onReceiveMessage ignores replies), disable_immediate_response (kvgate's
// local replies become spurious), request_header_mode SKIP (no headers
// message, decodeHeaders), and kvgate's own needs: a whole body
// (STREAMED and BUFFERED_PARTIAL are not served).
func startupRefusal(t *testing.T, data []byte) bool {
	t.Helper()
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, &b); err != nil {
		t.Fatal(err)
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
			lb := c.GetOriginalDstLbConfig()
			if !lb.GetUseHttpHeader() && lb.GetHttpHeaderName() != "" {
				return true
			}
		}
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if nf.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					var ep extprocfilterv3.ExternalProcessor
					if hf.GetTypedConfig().UnmarshalTo(&ep) != nil {
						continue
					}
					pm := ep.GetProcessingMode()
					duplex := func(m extprocfilterv3.ProcessingMode_BodySendMode) bool {
						return m == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
					}
					switch {
					case duplex(pm.GetRequestBodyMode()) && pm.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_SEND,
						duplex(pm.GetResponseBodyMode()) && pm.GetResponseTrailerMode() != extprocfilterv3.ProcessingMode_SEND,
						ep.GetObservabilityMode(), ep.GetDisableImmediateResponse(),
						pm.GetRequestHeaderMode() == extprocfilterv3.ProcessingMode_SKIP,
						pm.GetRequestBodyMode() == extprocfilterv3.ProcessingMode_STREAMED,
						pm.GetRequestBodyMode() == extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
						return true
					}
				}
			}
		}
	}
	return false
}

// The validator refuses exactly what the transcribed rules refuse, on the
// shipped bootstraps and on each item-8 mutation of them.
func TestValidatorAgreesWithEnvoy(t *testing.T) {
	type variant struct{ file, old, new string }
	variants := []variant{
		{"envoy.yaml", "", ""}, {"envoy-original-dst.yaml", "", ""}, {"envoy-header-routing.yaml", "", ""},
		{"envoy-buffered-failopen.yaml", "", ""}, {"envoy-mtls.yaml", "", ""},
		{"envoy.yaml", "failure_mode_allow: false", "failure_mode_allow: true"},
		{"envoy-original-dst.yaml", "      use_http_header: false\n", "      use_http_header: false\n      http_header_name: x-gateway-destination-endpoint\n"},
		{"envoy.yaml", "request_body_mode: FULL_DUPLEX_STREAMED", "request_body_mode: STREAMED"},
		{"envoy-buffered-failopen.yaml", "request_body_mode: BUFFERED", "request_body_mode: BUFFERED_PARTIAL"},
		{"envoy.yaml", "request_header_mode: SEND", "request_header_mode: SKIP"},
		{"envoy.yaml", "allow_mode_override: false", "allow_mode_override: false\n              observability_mode: true"},
		{"envoy.yaml", "allow_mode_override: false", "allow_mode_override: false\n              disable_immediate_response: true"},
		{"envoy.yaml", "request_trailer_mode: SEND", "request_trailer_mode: SKIP"},
	}
	for _, v := range variants {
		data, err := envoy.Shipped(v.file)
		if err != nil {
			t.Fatal(err)
		}
		if v.old != "" {
			if bytes.Count(data, []byte(v.old)) != 1 {
				t.Fatalf("%s: %q must occur once", v.file, v.old)
			}
			data = bytes.Replace(data, []byte(v.old), []byte(v.new), 1)
		}
		want := startupRefusal(t, data)
		_, err = envoy.Validate(data)
		if (err != nil) != want {
			t.Errorf("%s %q→%q: Envoy's rules refuse=%v, validator says %v", v.file, v.old, v.new, want, err)
		}
	}
}

// With a kvgate configuration: an ORIGINAL_DST cluster (metadataOverrideHost
// parses one ip:port) routes kvgate's value only when kvgate sends one
// endpoint; the validator refuses the config exactly when the value kvgate
// would send fails Envoy's parse.
func TestKvgateValueAgreesWithOriginalDst(t *testing.T) {
	data, err := os.ReadFile("../envoy-original-dst.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []envoy.Kvgate{{EnvoyRouting: "original_dst"}, {EnvoyRouting: "override_host", Fallbacks: 2}, {EnvoyRouting: "override_host", Fallbacks: 0}} {
		d := &server.Decision{Endpoint: "10.0.0.1:8000"}
		for i := range k.Fallbacks {
			d.Fallbacks = append(d.Fallbacks, "10.0.0."+string(rune('2'+i))+":8000")
		}
		value, _ := routeOnce(t, server.Config{SingleDestination: k.EnvoyRouting == "original_dst"}, d)
		_, parses := parseInternetAddressAndPortNoThrow(value)
		_, err := envoy.ValidateWith(data, &k)
		if parses != (err == nil) {
			t.Errorf("%+v: kvgate sends %q (Envoy parses: %v); validator: %v", k, value, parses, err)
		}
	}
}
