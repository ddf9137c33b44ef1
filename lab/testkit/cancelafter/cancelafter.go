// Package cancelafter is a test context that reports Canceled from its
// n-th look on and counts the looks, so a test can see where a loop
// consults its context, and that it stops at the look that saw the cancel,
// without any timing.
package cancelafter

import (
	"context"
	"sync/atomic"
)

// Context is cancelled, as far as Err says, from its n-th call on. Done is
// the background's (never closed): code under test must look at Err.
type Context struct {
	context.Context
	n, looks atomic.Int64
}

// New returns a context whose n-th Err call (and every later one) reports
// context.Canceled.
func New(n int64) *Context {
	c := &Context{Context: context.Background()}
	c.n.Store(n)
	return c
}

// Err counts the look and reports Canceled from the n-th on.
func (c *Context) Err() error {
	if c.looks.Add(1) >= c.n.Load() {
		return context.Canceled
	}
	return nil
}

// Looks is how many times Err was called.
func (c *Context) Looks() int64 { return c.looks.Load() }
