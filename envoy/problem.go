package envoy

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a config: the field path it concerns
// (proto field names, [i] for list items, [key] for map entries) and what
// is wrong there.
//
// An error (Warning false) is a config Envoy refuses, or one with which
// kvgate cannot route. A warning is a config Envoy accepts and kvgate
// routes through, but that costs something kvgate cannot make up for: a
// fallback's request booked on the primary because Envoy never reports
// the host it used, fallbacks never walked because the route does not
// retry. `kvgate validate-envoy` exits 0 on warnings alone unless
// --strict.
type Problem struct {
	Path    string
	Message string
	Warning bool
}

func (p Problem) String() string {
	s := p.Message
	if p.Path != "" {
		s = p.Path + ": " + s
	}
	if p.Warning {
		s = "warning: " + s
	}
	return s
}

// Error is returned by Validate when a config has problems, warnings
// included (the strict reading; see Fatal).
type Error struct {
	Problems []Problem
}

// Fatal reports whether any problem is an error rather than a warning:
// Envoy would refuse the config, or kvgate could not route through it.
func (e *Error) Fatal() bool {
	for _, p := range e.Problems {
		if !p.Warning {
			return true
		}
	}
	return false
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// problems collects Problems while a config is walked.
type problems struct {
	list []Problem
}

func (ps *problems) add(path, format string, args ...any) {
	ps.list = append(ps.list, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// warn records a warning: Envoy accepts the config and kvgate routes, but
// kvgate cannot account something (see Problem).
func (ps *problems) warn(path, format string, args ...any) {
	ps.list = append(ps.list, Problem{Path: path, Message: fmt.Sprintf(format, args...), Warning: true})
}

func (ps *problems) empty() bool { return len(ps.list) == 0 }

// sorted returns the problems deduplicated and in path order, so output is
// stable however the walk visited them.
func (ps *problems) sorted() []Problem {
	out := append([]Problem(nil), ps.list...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	dedup := out[:0]
	for i, p := range out {
		if i > 0 && p == out[i-1] {
			continue
		}
		dedup = append(dedup, p)
	}
	return dedup
}

// field appends a field name to a path.
func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// index appends a list index to a path.
func index(path string, i int) string {
	return fmt.Sprintf("%s[%d]", path, i)
}

// key appends a map key to a path.
func key(path, k string) string {
	return fmt.Sprintf("%s[%s]", path, k)
}
