package envoy

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a config: the field path it concerns
// (proto field names, [i] for list items, [key] for map entries) and what
// is wrong there.
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Error is returned by Validate when a config has problems.
type Error struct {
	Problems []Problem
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
