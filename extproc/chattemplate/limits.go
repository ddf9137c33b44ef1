package chattemplate

import "github.com/kvgate/kvgate/internal/third_party/jinja"

// OutputLimitError is what a render returns when it wrote more than
// RenderOptions.MaxOutputBytes. It is the jinja fork's own error, named
// here so that callers handle it without importing internal/third_party
// (only this package wraps the fork: internal/importrules).
type OutputLimitError = jinja.OutputLimitError
