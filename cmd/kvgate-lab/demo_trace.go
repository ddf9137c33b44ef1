package main

import (
	"bytes"
	_ "embed"
	"fmt"

	"github.com/kvgate/kvgate/lab/replay"
)

// embeddedTrace is the first 1,000 requests (about 5.5 minutes of
// arrivals) of the Mooncake FAST'25 conversation trace
// (kvcache-ai/Mooncake's trace release, Apache-2.0): the binary replays a
// workload with real prefix sharing without a checkout or ../shared.
//
//go:embed traces/conversation_head1000.jsonl
var embeddedTrace []byte

// embeddedTraceName is what reports call the embedded trace.
const embeddedTraceName = "mooncake conversation_trace.jsonl, first 1000 requests (embedded)"

// loadTrace reads up to limit requests (0: all) of the Mooncake trace at
// path, or of the embedded slice when path is empty.
func loadTrace(path string, limit int) ([]replay.TraceRequest, string, error) {
	if path != "" {
		reqs, err := replay.LoadTrace(path, limit)
		return reqs, path, err
	}
	reqs, err := replay.ParseTrace(bytes.NewReader(embeddedTrace), limit)
	if err != nil {
		return nil, "", fmt.Errorf("embedded trace: %w", err)
	}
	return reqs, embeddedTraceName, nil
}
