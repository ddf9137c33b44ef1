// Package yamlconf holds the value types that every component's YAML
// configuration shares. It is a leaf (standard library and yaml.v3 only),
// so that each component can own its Config type and the top-level config
// package can compose them without an import cycle (issue 18).
package yamlconf

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written as "250ms", "30s", "1h".
type Duration time.Duration

// UnmarshalYAML parses Go duration syntax.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration like \"30s\"", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: bad duration %q (want e.g. \"250ms\", \"30s\")", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
