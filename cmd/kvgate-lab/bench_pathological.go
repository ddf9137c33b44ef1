package main

import (
	"context"
	"io"
	"time"

	"github.com/kvgate/kvgate/lab/benchmarks"
)

func init() { registerBench("pathological", benchPathological) }

// benchPathological compares kvgate's tokenizer with Hugging Face's on the
// inputs issue 15 attacked with, and shows what the bounded request path
// answers for each.
func benchPathological(ctx context.Context, w io.Writer, _ time.Duration) error {
	return benchmarks.Pathological(ctx, w, benchmarks.PathologicalOptions{Command: "make bench"})
}
