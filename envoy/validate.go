package envoy

import (
	"fmt"
	"os"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
)

// Kind is what a YAML document in a config file is.
type Kind string

const (
	KindBootstrap            Kind = "Bootstrap"            // a standalone Envoy bootstrap
	KindEnvoyFilter          Kind = "EnvoyFilter"          // Istio networking.istio.io
	KindDestinationRule      Kind = "DestinationRule"      // Istio networking.istio.io
	KindEnvoyExtensionPolicy Kind = "EnvoyExtensionPolicy" // Envoy Gateway gateway.envoyproxy.io
	KindEnvoyPatchPolicy     Kind = "EnvoyPatchPolicy"     // Envoy Gateway gateway.envoyproxy.io
	KindClientTrafficPolicy  Kind = "ClientTrafficPolicy"  // Envoy Gateway gateway.envoyproxy.io
)

// kubernetesKinds maps each supported Kubernetes kind to its API group.
var kubernetesKinds = map[Kind]string{
	KindEnvoyFilter:          "networking.istio.io",
	KindDestinationRule:      "networking.istio.io",
	KindEnvoyExtensionPolicy: "gateway.envoyproxy.io",
	KindEnvoyPatchPolicy:     "gateway.envoyproxy.io",
	KindClientTrafficPolicy:  "gateway.envoyproxy.io",
}

// ValidateFile reads and validates one config file (ValidateWith), also
// holding it to what the kvgate configuration k sends (nil: no such
// check). A read failure is returned as is (not as *Error), so callers can
// tell "cannot read" from "invalid".
func ValidateFile(path string, k *Kvgate) ([]Kind, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	data := make([]byte, MaxConfigBytes+1)
	n, err := readFull(f, data)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return ValidateWith(data[:n], k)
}

// Validate checks every YAML document in data (a bootstrap, or the
// Kubernetes objects listed in Kind) and the rules spanning them. It
// returns the kind of each document, and an *Error listing every problem
// found, or nil.
func Validate(data []byte) ([]Kind, error) { return ValidateWith(data, nil) }

// ValidateWith is Validate, also holding the config to what the kvgate
// configuration k sends Envoy (nil: no such check): an ORIGINAL_DST cluster
// cannot take fallbacks, and override_host walks them only on retry.
func ValidateWith(data []byte, k *Kvgate) ([]Kind, error) {
	var ps problems
	docs, err := parseYAML(data)
	if err != nil {
		return nil, &Error{Problems: []Problem{{Message: err.Error()}}}
	}
	f := newFacts()
	f.kvgate = k
	kinds := make([]Kind, len(docs))
	for i, doc := range docs {
		prefix := ""
		if len(docs) > 1 {
			prefix = fmt.Sprintf("documents[%d]", i)
		}
		kinds[i] = validateDocument(&ps, f, prefix, doc)
	}
	checkFile(&ps, f)
	if ps.empty() {
		return kinds, nil
	}
	return kinds, &Error{Problems: ps.sorted()}
}

func validateDocument(ps *problems, f *facts, path string, doc any) Kind {
	obj, _ := doc.(map[string]any)
	kindName, isObject := obj["kind"].(string)
	_, hasAPIVersion := obj["apiVersion"].(string)
	if !isObject || !hasAPIVersion {
		validateBootstrap(ps, f, path, doc)
		return KindBootstrap
	}
	kind := Kind(kindName)
	group, ok := kubernetesKinds[kind]
	if !ok {
		ps.add(field(path, "kind"), "unsupported kind %q (supported: an Envoy bootstrap, EnvoyFilter, DestinationRule, EnvoyExtensionPolicy, EnvoyPatchPolicy, ClientTrafficPolicy)", kindName)
		return kind
	}
	apiVersion := obj["apiVersion"].(string)
	if !strings.HasPrefix(apiVersion, group+"/") {
		ps.add(field(path, "apiVersion"), "%s belongs to API group %s, got %q", kind, group, apiVersion)
	}
	meta := checkKeys(ps, field(path, "metadata"), obj["metadata"], "name", "namespace", "labels", "annotations")
	if name, _ := meta["name"].(string); name == "" {
		ps.add(field(field(path, "metadata"), "name"), "required")
	}
	spec := field(path, "spec")
	checkKeys(ps, path, obj, "apiVersion", "kind", "metadata", "spec", "status")
	switch kind {
	case KindEnvoyFilter:
		validateEnvoyFilter(ps, f, spec, obj["spec"])
	case KindDestinationRule:
		validateDestinationRule(ps, spec, obj["spec"])
	case KindEnvoyExtensionPolicy:
		validateExtensionPolicy(ps, f, spec, obj["spec"])
	case KindEnvoyPatchPolicy:
		validatePatchPolicy(ps, f, spec, obj["spec"])
	case KindClientTrafficPolicy:
		validateClientTrafficPolicy(ps, spec, obj["spec"])
	}
	return kind
}

func validateBootstrap(ps *problems, f *facts, path string, doc any) {
	var b bootstrapv3.Bootstrap
	if decodeMessage(ps, path, doc, &b, false) {
		inspect(ps, f, path, &b)
	}
}
