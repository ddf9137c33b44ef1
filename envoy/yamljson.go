package envoy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"gopkg.in/yaml.v3"
)

// Bounds on what Validate reads: Envoy configs are kilobytes; these stop a
// hostile or mistaken input from costing more than a moment.
const (
	// MaxConfigBytes is the largest config file Validate accepts.
	MaxConfigBytes = 4 << 20
	maxDocuments   = 64
	maxDepth       = 128
)

// parseYAML decodes every YAML document in data into JSON-compatible
// values (map[string]any, []any, string, float64/int64/uint64, bool, nil).
// Empty documents are skipped.
func parseYAML(data []byte) ([]any, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("config is %d bytes, more than the %d allowed", len(data), MaxConfigBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []any
	for n := 0; ; n++ {
		var raw any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", n+1, err)
		}
		if n >= maxDocuments {
			return nil, fmt.Errorf("more than %d YAML documents", maxDocuments)
		}
		if raw == nil {
			continue
		}
		v, err := toJSONValue("", raw, 0)
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", n+1, err)
		}
		docs = append(docs, v)
	}
	if len(docs) == 0 {
		return nil, errors.New("no YAML document in the config")
	}
	return docs, nil
}

// toJSONValue turns what yaml.v3 decodes into interface{} into values that
// encoding/json marshals as Envoy's own YAML loader would see them.
func toJSONValue(path string, v any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%s: nested deeper than %d levels", path, maxDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			c, err := toJSONValue(field(path, k), e, depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s: mapping key %v is a %T, not a string", path, k, k)
			}
			c, err := toJSONValue(field(path, ks), e, depth+1)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := toJSONValue(index(path, i), e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("%s: %v has no JSON form", path, x)
		}
		return x, nil
	case int:
		return int64(x), nil
	case time.Time:
		// An unquoted date in YAML; protobuf JSON wants the RFC 3339 string.
		return x.Format(time.RFC3339Nano), nil
	case []byte:
		return base64.StdEncoding.EncodeToString(x), nil
	case nil, string, bool, int64, uint64:
		return x, nil
	default:
		return nil, fmt.Errorf("%s: unsupported YAML value of type %T", path, v)
	}
}

// sortedKeys returns a JSON object's keys in order, for stable output.
func sortedKeys(obj map[string]any) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
