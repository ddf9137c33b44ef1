package config

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kvgate/kvgate/internal/didyoumean"
)

// maxDecodeErrors bounds how many key errors one Parse reports.
const maxDecodeErrors = 10

// DecodeError is one key of a configuration document that does not fit
// Config: unknown, or a value of the wrong type. yaml.v3's own errors
// name the Go type and line ("field block_sise not found in type
// config.Model", "cannot unmarshal !!str `sixteen` into int") but not the
// key path a user wrote, so Parse walks the document against Config first
// and reports these instead, the way `kvgate validate-envoy` names a path
// and suggests the closest field.
type DecodeError struct {
	Line int
	Path string // e.g. models[0].block_size
	Msg  string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("line %d: %s: %s", e.Line, e.Path, e.Msg)
}

// checkDocument reports the document's unknown keys and mistyped values
// (at most maxDecodeErrors, joined), nil when it fits Config or is not
// valid YAML (the decoder then reports the syntax error).
func checkDocument(data []byte) error {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil // empty (io.EOF) or a syntax error the decoder reports
	}
	w := &documentWalk{}
	w.walk(&doc, reflect.TypeFor[Config](), "")
	return errors.Join(w.errs...)
}

type documentWalk struct {
	errs []error
}

func (w *documentWalk) fail(n *yaml.Node, path, format string, a ...any) {
	if len(w.errs) == maxDecodeErrors {
		return
	}
	if path == "" {
		path = "(top level)"
	}
	w.errs = append(w.errs, &DecodeError{Line: n.Line, Path: path, Msg: fmt.Sprintf(format, a...)})
}

var yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func (w *documentWalk) walk(n *yaml.Node, t reflect.Type, path string) {
	if len(w.errs) == maxDecodeErrors {
		return
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) > 0 {
			w.walk(n.Content[0], t, path)
		}
		return
	case yaml.AliasNode:
		if n.Alias != nil {
			w.walk(n.Alias, t, path)
		}
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // leaves the zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(yamlUnmarshaler) {
		// The type decodes itself (Duration); its error gets the path.
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			w.fail(n, path, "%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("line %d: ", n.Line)))
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			w.fail(n, path, "want a mapping of keys, got %s", describeNode(n))
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fields[k.Value]
			if !ok {
				w.fail(k, join(path, k.Value), "unknown key%s", suggestKey(k.Value, fields))
				continue
			}
			w.walk(v, f.Type, join(path, k.Value))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.fail(n, path, "want a mapping, got %s", describeNode(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			w.walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && n.Kind == yaml.ScalarNode {
			return // []byte from a string
		}
		if n.Kind != yaml.SequenceNode {
			w.fail(n, path, "want a list, got %s", describeNode(n))
			return
		}
		for i, item := range n.Content {
			w.walk(item, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			w.fail(n, path, "want an integer, got %s", describeNode(n))
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			w.fail(n, path, "want a number, got %s", describeNode(n))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			w.fail(n, path, "want true or false, got %s", describeNode(n))
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			w.fail(n, path, "want a string, got %s", describeNode(n))
		}
	}
}

// describeNode says what a user wrote: `"sixteen"`, `a list`.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	return strconv.Quote(v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields maps each key yaml.v3 decodes into t (its `yaml:"name"` tag,
// else the lowercased field name, as yaml.v3's getStructInfo does; inline
// structs contribute their own keys) to the field.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					fields[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f
	}
	return fields
}

// suggestKey names the closest known key when the unknown one looks
// misspelt (the same rule as validate-envoy's suggestField); keys are
// tried in sorted order so that ties always suggest the same one.
func suggestKey(key string, fields map[string]reflect.StructField) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	best := didyoumean.Closest(strings.ToLower(key), names)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}
