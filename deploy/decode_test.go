//go:build helm || kubeapiserver

package deploy

import (
	"fmt"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// meshKinds are objects whose API types are not Go dependencies here: the
// Envoy validator (package envoy) checks their fields instead, against
// Istio's networking API and Envoy Gateway's v1alpha1 API and Envoy's protos.
var meshKinds = map[string]string{
	"EnvoyFilter":          "networking.istio.io/",
	"DestinationRule":      "networking.istio.io/",
	"EnvoyExtensionPolicy": "gateway.envoyproxy.io/",
	"EnvoyPatchPolicy":     "gateway.envoyproxy.io/",
	"ClientTrafficPolicy":  "gateway.envoyproxy.io/",
}

// strictDecoder decodes YAML into the registered API types (core, apps,
// policy, autoscaling, rbac, networking from client-go; the Prometheus
// Operator's monitoring.coreos.com/v1; Gateway API v1beta1 and v1; GIE's
// InferencePool v1), failing on unknown or duplicate
// fields, as `kubectl apply --validate=strict` does.
type strictDecoder struct {
	scheme *runtime.Scheme
	ser    *kjson.Serializer
}

func newStrictDecoder() (*strictDecoder, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := gatewayv1beta1.Install(s); err != nil {
		return nil, err
	}
	// BackendTLSPolicy (TLS from Envoy Gateway to kvgate) is GA in v1.
	if err := gatewayv1.Install(s); err != nil {
		return nil, err
	}
	// InferencePool (inference.networking.k8s.io/v1, GIE v1.6.2 api/v1).
	if err := giev1.Install(s); err != nil {
		return nil, err
	}
	ser := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: true})
	return &strictDecoder{scheme: s, ser: ser}, nil
}

// decode returns the typed object; an error names the object and the field.
func (d *strictDecoder) decode(m manifest) (runtime.Object, error) {
	obj, gvk, err := d.ser.Decode(m.YAML, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m, err)
	}
	if gvk.Version == "" || gvk.Kind == "" {
		return nil, fmt.Errorf("%s: no apiVersion/kind", m)
	}
	return obj, nil
}

func (d *strictDecoder) isMesh(m manifest) bool {
	_, ok := meshKinds[m.Kind]
	return ok
}

// decodeAll strictly decodes every non-mesh object of a render.
func decodeAll(t *testing.T, ms []manifest) map[string]runtime.Object {
	t.Helper()
	d, err := newStrictDecoder()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]runtime.Object{}
	for _, m := range ms {
		if d.isMesh(m) {
			continue
		}
		obj, err := d.decode(m)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		out[m.String()] = obj
	}
	return out
}

// Every rendered object decodes strictly into its API type, or is a mesh
// object of the group the validator knows it by; names are unique per kind
// and namespace.
func TestRenderedObjectsDecodeStrictly(t *testing.T) {
	d, err := newStrictDecoder()
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			ms := mustRender(t, sc, nil)
			seen := map[string]string{}
			for _, m := range ms {
				if group, ok := meshKinds[m.Kind]; ok {
					if !strings.Contains(string(m.YAML), "apiVersion: "+group) {
						t.Errorf("%s: apiVersion is not in %s", m, group)
					}
					continue
				}
				obj, err := d.decode(m)
				if err != nil {
					t.Errorf("%v", err)
					continue
				}
				acc, ok := obj.(interface {
					GetName() string
					GetNamespace() string
				})
				if !ok {
					t.Errorf("%s: no object metadata", m)
					continue
				}
				if acc.GetName() == "" {
					t.Errorf("%s: metadata.name empty", m)
				}
				if acc.GetNamespace() == "" {
					t.Errorf("%s: metadata.namespace empty (namespaced objects must say where they go)", m)
				}
				key := m.Kind + " " + acc.GetNamespace() + "/" + acc.GetName()
				if prev, dup := seen[key]; dup {
					t.Errorf("%s: same %s as %s", m, key, prev)
				}
				seen[key] = m.String()
			}
		})
	}
}

// The decoder really is strict: an unknown field, in a pod template or a
// ServiceMonitor, fails with the field's name.
func TestStrictDecodingRejectsUnknownField(t *testing.T) {
	d, err := newStrictDecoder()
	if err != nil {
		t.Fatal(err)
	}
	ms := mustRender(t, "testdata/values-full.yaml", nil)
	cases := []struct {
		kind, anchor, inject, field string
	}{
		{"Deployment", "        imagePullPolicy:", "        imagePullPolcy: Always\n", "imagePullPolcy"},
		{"ServiceMonitor", "  endpoints:", "  endpointz: []\n", "endpointz"},
		{"Service", "  ports:", "  sessionAffinityConfigs: {}\n", "sessionAffinityConfigs"},
	}
	for _, c := range cases {
		objs := byKind(ms, c.kind)
		if len(objs) == 0 {
			t.Fatalf("no %s rendered in the full scenario", c.kind)
		}
		m := objs[0]
		if _, err := d.decode(m); err != nil {
			t.Fatalf("%s does not decode before the change: %v", m, err)
		}
		s := string(m.YAML)
		i := strings.Index(s, c.anchor)
		if i < 0 {
			t.Fatalf("%s: anchor %q not found", m, c.anchor)
		}
		m.YAML = []byte(s[:i] + c.inject + s[i:])
		_, err := d.decode(m)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s with an unknown field %q: got %v, want an error naming it", m, c.field, err)
		}
	}
}
