package envoy

import (
	"errors"
	"io"
	"slices"
	"strings"
)

// checkKeys checks that v is an object whose keys are all allowed and
// returns it (nil when v is absent or not an object). It is how the
// Kubernetes objects' own fields, which have no proto here, are checked.
func checkKeys(ps *problems, path string, v any, allowed ...string) map[string]any {
	if v == nil {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		ps.add(path, "expected an object, got %s", jsonKind(v))
		return nil
	}
	for _, k := range sortedKeys(obj) {
		if !slices.Contains(allowed, k) {
			ps.add(field(path, k), "unknown field %q (known: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return obj
}

// checkEnum checks that v, when present, is one of the allowed strings.
func checkEnum(ps *problems, path string, v any, allowed ...string) string {
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok || !slices.Contains(allowed, s) {
		ps.add(path, "%v is not one of %s", v, strings.Join(allowed, ", "))
		return ""
	}
	return s
}

// checkList checks that v, when present, is a list and returns it.
func checkList(ps *problems, path string, v any) []any {
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		ps.add(path, "expected a list, got %s", jsonKind(v))
	}
	return list
}

// checkStrings checks that v, when present, is a list of strings.
func checkStrings(ps *problems, path string, v any) []string {
	var out []string
	for i, e := range checkList(ps, path, v) {
		s, ok := e.(string)
		if !ok {
			ps.add(index(path, i), "expected a string, got %s", jsonKind(e))
			continue
		}
		out = append(out, s)
	}
	return out
}

func checkBool(ps *problems, path string, v any) bool {
	if v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		ps.add(path, "expected true or false, got %s", jsonKind(v))
	}
	return b
}

func checkString(ps *problems, path string, v any, required bool) string {
	if v == nil {
		if required {
			ps.add(path, "required")
		}
		return ""
	}
	s, ok := v.(string)
	if !ok {
		ps.add(path, "expected a string, got %s", jsonKind(v))
	}
	if required && ok && s == "" {
		ps.add(path, "required")
	}
	return s
}

// readFull reads until buf is full or EOF and returns how much was read.
func readFull(r io.Reader, buf []byte) (int, error) {
	n, err := io.ReadFull(r, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return n, nil
	}
	return n, err
}
