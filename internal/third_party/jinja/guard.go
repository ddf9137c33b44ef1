package jinja

import (
	"context"
	"fmt"
)

// kvgate fork: a render is bounded. Chat templates are trusted files, but
// the data they loop over is a client's request: 4,096 messages of up to
// 8 MiB each. Upstream renders to completion whatever the caller does; here
// the caller's context ends a render mid-way and the output is capped.

// RenderOptions bound one render; the zero value bounds only by ctx.
type RenderOptions struct {
	// MaxOutputBytes stops the render once it has written more than this
	// (text assigned by {% set %} blocks and macro results included, as
	// they are written). 0 = no limit.
	MaxOutputBytes int
	// SizeHint is the caller's estimate of the output's size (kvgate: the
	// request body's, for a chat prompt). The output buffer starts that
	// large, capped at MaxOutputBytes, so a long prompt is written without
	// doubling and copying the buffer a dozen times. 0 = no estimate.
	SizeHint int
}

// OutputLimitError: the render wrote more than RenderOptions.MaxOutputBytes.
type OutputLimitError struct{ Limit int }

func (e *OutputLimitError) Error() string {
	return fmt.Sprintf("rendered output exceeds %d bytes", e.Limit)
}

// guardCheckEvery is how many steps (nodes executed, loop iterations) pass
// between looks at the context: a step is well under a microsecond, so a
// cancelled render stops within about a millisecond, and a look (~20 ns)
// costs nothing next to 1,024 steps.
const guardCheckEvery = 1024

// guard is one bounded render's state, shared by every evaluator the
// render creates.
type guard struct {
	ctx       context.Context
	maxOutput int
	sizeHint  int
	written   int
	steps     int
	err       error
}

// step counts one unit of work and reports why the render must stop, if
// it must.
func (g *guard) step() error {
	if g.err != nil {
		return g.err
	}
	if g.maxOutput > 0 && g.written > g.maxOutput {
		g.err = &OutputLimitError{Limit: g.maxOutput}
		return g.err
	}
	g.steps++
	if g.steps%guardCheckEvery == 0 {
		g.err = g.ctx.Err()
	}
	return g.err
}

// finalCheck catches output written after the last step.
func (g *guard) finalCheck() error {
	if g.err == nil && g.maxOutput > 0 && g.written > g.maxOutput {
		g.err = &OutputLimitError{Limit: g.maxOutput}
	}
	return g.err
}
