package envoy

import (
	"embed"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// shipped holds the configs of this folder, so that tests and the
// harness run exactly what users are told to deploy.
//
//go:embed *.yaml istio/*.yaml envoy-gateway/*.yaml
var shipped embed.FS

// Shipped returns a shipped config by its path in envoy/ ("envoy.yaml",
// "istio/envoyfilter.yaml").
func Shipped(name string) ([]byte, error) {
	data, err := shipped.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("envoy/%s: not a shipped config: %w", name, err)
	}
	return data, nil
}

// Document is one YAML document of a config file, as JSON values.
type Document struct {
	Kind  Kind
	Value map[string]any
}

// Documents validates data (Validate) and returns its documents, for
// tools that act on the config, such as the Envoy harness.
func Documents(data []byte) ([]Document, error) {
	kinds, err := Validate(data)
	if err != nil {
		return nil, err
	}
	docs, err := parseYAML(data)
	if err != nil {
		return nil, err
	}
	out := make([]Document, len(docs))
	for i, d := range docs {
		obj, ok := d.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("document %d is not an object", i)
		}
		out[i] = Document{Kind: kinds[i], Value: obj}
	}
	return out, nil
}

// Decode decodes a JSON value from a Document into msg the way Validate
// does (protojson, unknown fields refused).
func Decode(v any, msg proto.Message) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(data, msg)
}
