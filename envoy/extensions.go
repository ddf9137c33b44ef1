package envoy

import (
	"sort"
	"strings"

	udpatypev1 "github.com/cncf/xds/go/udpa/type/v1"
	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	filelogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streamlogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	healthcheckv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	setmetadatav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/set_metadata/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	randomv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/random/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpupstreamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/internal/didyoumean"
)

// extensionTypes are the typed_config payloads the validator links, beside
// the core API the bootstrap, listener, cluster, route and endpoint
// messages pull in. Linking every go-control-plane extension package (as
// kvgate once did) made bin/kvgate 17 MB larger (136.9 against 119.6 MB)
// for types no kvgate config names (issue 27 item 4), so the list is what
// the shipped and
// documented configs use (envoy/*.yaml, envoy/istio, envoy/envoy-gateway,
// the Helm chart's mesh templates) and what sits beside them in an ext_proc
// deployment: the other load-balancing policies override_host may fall
// back to, access logs, the health-check and buffer filters, plaintext and
// TLS transport sockets, and the xDS TypedStruct and matcher types. Any
// other @type is reported as unknown, naming this list (ExtensionTypes).
// Adding a type is one line here; TestExtensionTypesResolve checks each.
var extensionTypes = []proto.Message{
	&hcmv3.HttpConnectionManager{},
	&routerv3.Router{},
	&extprocv3.ExternalProcessor{},
	&extprocv3.ExtProcPerRoute{},
	&headermutationv3.HeaderMutation{},
	&headermutationv3.HeaderMutationPerRoute{},
	&setmetadatav3.Config{},
	&bufferv3.Buffer{},
	&bufferv3.BufferPerRoute{},
	&healthcheckv3.HealthCheck{},
	&previoushostsv3.PreviousHostsPredicate{},
	&httpupstreamv3.HttpProtocolOptions{},
	&overridehostv3.OverrideHost{},
	&leastrequestv3.LeastRequest{},
	&roundrobinv3.RoundRobin{},
	&randomv3.Random{},
	&ringhashv3.RingHash{},
	&maglevv3.Maglev{},
	&tlsv3.UpstreamTlsContext{},
	&tlsv3.DownstreamTlsContext{},
	&tlsv3.Secret{},
	&rawbufferv3.RawBuffer{},
	&filelogv3.FileAccessLog{},
	&streamlogv3.StdoutAccessLog{},
	&streamlogv3.StderrAccessLog{},
	&udpatypev1.TypedStruct{},
	&xdstypev3.TypedStruct{},
	&xdsmatcherv3.Matcher{},
}

// typeURLPrefix is how an Any's @type names a message.
const typeURLPrefix = "type.googleapis.com/"

// ExtensionTypes lists the @type URLs of the extension payloads the
// validator checks, sorted (`kvgate validate-envoy --types`).
func ExtensionTypes() []string {
	urls := make([]string, len(extensionTypes))
	for i, m := range extensionTypes {
		urls[i] = typeURLPrefix + string(m.ProtoReflect().Descriptor().FullName())
	}
	sort.Strings(urls)
	return urls
}

// suggestExtension is the " (did you mean …?)" for an @type the registry
// does not hold: the nearest linked extension when the URL is a misspelling
// of one, else a pointer to the list.
func suggestExtension(url string) string {
	urls := ExtensionTypes()
	if best := didyoumean.Closest(url, urls); best != "" {
		return " (did you mean " + best + "?)"
	}
	name := strings.TrimPrefix(url, typeURLPrefix)
	if strings.HasPrefix(name, "envoy.") || strings.HasPrefix(name, "xds.") || strings.HasPrefix(name, "udpa.") {
		return "; an Envoy type this validator does not link is reported here too: it checks the core API and the extension types `kvgate validate-envoy --types` lists"
	}
	return ""
}
