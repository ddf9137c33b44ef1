package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// The `make run` demo end to end, small: engines publish over real ZMQ,
// the indexer repairs the injected gap, and the index agrees with every
// engine's own cache.
func TestDemoRuns(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := demo(ctx, &out, demoOptions{perFleet: 3, convs: 8, turns: 4, rate: 400, listen: "127.0.0.1:0", seed: 3})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`agrees with the engines' own caches on (\d+)/(\d+)`).FindStringSubmatch(out.String())
	if m == nil || m[1] != m[2] || m[2] != strconv.Itoa(8*6) {
		t.Fatalf("no full agreement line:\n%s", out.String())
	}
	if !regexp.MustCompile(`127\.0\.0\.1:18101#0\s+\d+\s+[1-9]\d*\s+[1-9]\d*\s+[1-9]\d*\s+0\s`).MatchString(out.String()) {
		t.Fatalf("engine B1's gap was not shown repaired without a reset:\n%s", out.String())
	}
}
