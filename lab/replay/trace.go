// Package replay replays a Mooncake-format request trace against a fleet
// of simulated engines (lab/enginesim) in virtual time, once per routing
// policy on a fresh fleet, and reports cache-hit and latency figures side
// by side. The kv-aware policies are driven exactly as extproc drives them:
// engine KV events go through ingest.Worker into index.Memory, load through
// loadview, and the choice is picker.Pick's.
package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// TraceBlockSize is the Mooncake trace's block: each hash_id stands for 512
// prompt tokens (kvcache-ai/Mooncake FAST'25 trace release).
const TraceBlockSize = 512

// Bounds on a trace, so that a malformed file is an error and not an
// allocation failure. The conversation trace's longest line is ~1.5 KiB and
// its longest prompt 126,195 tokens.
const (
	MaxTraceLineBytes = 1 << 20
	MaxTraceRequests  = 1 << 21
	MaxInputLength    = 1 << 21
	MaxOutputLength   = 1 << 20
)

// TraceRequest is one line of a Mooncake trace.
type TraceRequest struct {
	Timestamp    int64    // arrival, ms from the trace's start
	InputLength  int      // prompt tokens
	OutputLength int      // generated tokens
	HashIDs      []uint64 // one id per 512-token block of the prompt, prefix-chained
	Line         int      // 1-based line in the file, for messages
	// Tenant and Priority are optional (not in the Mooncake release): the
	// caller the request belongs to and its priority band (higher leaves
	// flow control's queue first), as the multi-tenant mixes of
	// lab/workload write them. "" and 0 when absent.
	Tenant   string
	Priority int
}

// Bounds on the optional tenant and priority fields.
const (
	MaxTenantLen   = 256
	MaxPriorityAbs = 1 << 10
)

type traceLine struct {
	Timestamp    *json.Number `json:"timestamp"`
	InputLength  *int         `json:"input_length"`
	OutputLength *int         `json:"output_length"`
	HashIDs      *[]uint64    `json:"hash_ids"`
	Tenant       string       `json:"tenant"`
	Priority     int          `json:"priority"`
}

// ParseTrace reads a JSONL Mooncake trace: blank lines are skipped; limit
// > 0 stops after that many requests. Every malformed line is an error
// naming its line number.
func ParseTrace(r io.Reader, limit int) ([]TraceRequest, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxTraceLineBytes)
	var out []TraceRequest
	line := 0
	lastTS := int64(math.MinInt64)
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if limit > 0 && len(out) >= limit {
			break
		}
		if len(out) >= MaxTraceRequests {
			return nil, fmt.Errorf("trace line %d: more than %d requests", line, MaxTraceRequests)
		}
		req, err := parseTraceLine(b)
		if err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if req.Timestamp < lastTS {
			return nil, fmt.Errorf("trace line %d: timestamp %d before the previous line's %d (want arrival order)", line, req.Timestamp, lastTS)
		}
		lastTS = req.Timestamp
		req.Line = line
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("trace line %d: longer than %d bytes", line+1, MaxTraceLineBytes)
		}
		return nil, fmt.Errorf("trace line %d: %w", line+1, err)
	}
	if len(out) == 0 {
		return nil, errors.New("trace: no requests")
	}
	return out, nil
}

func parseTraceLine(b []byte) (TraceRequest, error) {
	var tl traceLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&tl); err != nil {
		return TraceRequest{}, fmt.Errorf("not a JSON object of the Mooncake schema: %w", err)
	}
	if dec.More() {
		return TraceRequest{}, errors.New("trailing data after the JSON object")
	}
	switch {
	case tl.Timestamp == nil:
		return TraceRequest{}, errors.New("missing timestamp")
	case tl.InputLength == nil:
		return TraceRequest{}, errors.New("missing input_length")
	case tl.OutputLength == nil:
		return TraceRequest{}, errors.New("missing output_length")
	case tl.HashIDs == nil:
		return TraceRequest{}, errors.New("missing hash_ids")
	}
	ts, err := tl.Timestamp.Int64()
	if err != nil {
		f, ferr := tl.Timestamp.Float64()
		if ferr != nil || math.IsNaN(f) || f < 0 || f > 1e15 {
			return TraceRequest{}, fmt.Errorf("timestamp %s: want milliseconds >= 0", tl.Timestamp.String())
		}
		ts = int64(f)
	}
	req := TraceRequest{Timestamp: ts, InputLength: *tl.InputLength, OutputLength: *tl.OutputLength, HashIDs: *tl.HashIDs, Tenant: tl.Tenant, Priority: tl.Priority}
	switch {
	case len(req.Tenant) > MaxTenantLen:
		return req, fmt.Errorf("tenant of %d bytes, more than %d", len(req.Tenant), MaxTenantLen)
	case req.Priority < -MaxPriorityAbs || req.Priority > MaxPriorityAbs:
		return req, fmt.Errorf("priority %d outside [%d, %d]", req.Priority, -MaxPriorityAbs, MaxPriorityAbs)
	case req.Timestamp < 0 || req.Timestamp > 1e15:
		return req, fmt.Errorf("timestamp %d: want milliseconds in [0, 1e15]", req.Timestamp)
	case req.InputLength < 1 || req.InputLength > MaxInputLength:
		return req, fmt.Errorf("input_length %d outside [1, %d]", req.InputLength, MaxInputLength)
	case req.OutputLength < 0 || req.OutputLength > MaxOutputLength:
		return req, fmt.Errorf("output_length %d outside [0, %d]", req.OutputLength, MaxOutputLength)
	}
	if want := (req.InputLength + TraceBlockSize - 1) / TraceBlockSize; len(req.HashIDs) != want {
		return req, fmt.Errorf("%d hash_ids for input_length %d, want %d (one per %d tokens)", len(req.HashIDs), req.InputLength, want, TraceBlockSize)
	}
	for i, id := range req.HashIDs {
		if id > math.MaxUint32 {
			return req, fmt.Errorf("hash_ids[%d] = %d: above 2^32-1", i, id)
		}
	}
	return req, nil
}

// LoadTrace reads a trace file (see ParseTrace).
func LoadTrace(path string, limit int) ([]TraceRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	reqs, err := ParseTrace(f, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return reqs, nil
}

// Tokens synthesises the prompt of r into dst (reused when large enough),
// as shared/notes/wire-formats.md §7 prescribes: each hash_id becomes 512
// copies of one token derived from the id, truncated to input_length, so
// the last block may be partial. The token is the id itself (ids are
// bounded to 32 bits by ParseTrace), which keeps distinct ids distinct.
func Tokens(dst []uint32, r TraceRequest) []uint32 {
	if cap(dst) < r.InputLength {
		dst = make([]uint32, r.InputLength)
	}
	dst = dst[:r.InputLength]
	for i, id := range r.HashIDs {
		lo := i * TraceBlockSize
		hi := min(lo+TraceBlockSize, r.InputLength)
		t := uint32(id)
		for j := lo; j < hi; j++ {
			dst[j] = t
		}
	}
	return dst
}
