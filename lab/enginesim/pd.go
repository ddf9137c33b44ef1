package enginesim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Prefill/decode disaggregation as vLLM's NixlConnector does it
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py) and as
// llm-d's routing sidecar drives it:
//
//  1. The sidecar sends the request to the prefill worker with
//     kv_transfer_params {do_remote_decode: true, do_remote_prefill: false},
//     max_tokens 1 and stream false.
//  2. The prefill worker prefills, finishes length-capped, keeps the blocks
//     (NixlConnectorScheduler.request_finished delays their free until the
//     decoder has read them or VLLM_NIXL_ABORT_REQUEST_TIMEOUT passes) and
//     answers with kv_transfer_params {do_remote_prefill: true,
//     do_remote_decode: false, remote_block_ids, remote_engine_id,
//     remote_request_id, remote_host, remote_port, tp_size}.
//  3. The sidecar passes those params to the decode worker, which loads the
//     prompt's KV from the prefill worker instead of computing it.
//
// The simulator's side channel is HTTP: remote_host:remote_port is the
// prefill simulator's listen address and the decoder posts the read
// notification to releasePath there, as NIXL's notification would.

// Role is what a simulated worker does in a P/D deployment.
type Role string

const (
	RoleAggregated Role = "aggregated" // prefill and decode (no KV connector)
	RolePrefill    Role = "prefill"    // kv_producer
	RoleDecode     Role = "decode"     // kv_consumer
)

// ParseRole validates a --role value.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAggregated, RolePrefill, RoleDecode:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want aggregated, prefill or decode", s)
}

// releasePath is where a prefill simulator hears that a decoder has read a
// request's blocks.
const releasePath = "/enginesim/kv_read_done"

// defaultAbortTimeout is vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s):
// blocks a decoder never reads are freed after it.
const defaultAbortTimeout = 480 * time.Second

// maxRemoteBlockIDs bounds remote_block_ids (a 1M-token prompt at block
// size 16 is 65,536 blocks).
const maxRemoteBlockIDs = 1 << 17

// kvTransferParams is the request's kv_transfer_params object. Unknown
// members (transfer_id, tp_size, remote_dp_rank …) are ignored, as vLLM's
// connector ignores what it does not use.
type kvTransferParams struct {
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	RemoteEngineID  string `json:"remote_engine_id"`
	RemoteRequestID string `json:"remote_request_id"`
	RemoteHost      string `json:"remote_host"`
	RemotePort      int    `json:"remote_port"`
	// RemoteBlockIDs is a list of ids, or (newer vLLM, one list per KV
	// cache group) a list of lists; flattened on parse.
	RemoteBlockIDs []int64 `json:"-"`
	present        bool
}

// parseKVTransferParams decodes kv_transfer_params; null or absent yields
// the zero value.
func parseKVTransferParams(raw json.RawMessage) (kvTransferParams, error) {
	var p kvTransferParams
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return p, nil
	}
	var wire struct {
		DoRemoteDecode  *bool           `json:"do_remote_decode"`
		DoRemotePrefill *bool           `json:"do_remote_prefill"`
		RemoteEngineID  *string         `json:"remote_engine_id"`
		RemoteRequestID *string         `json:"remote_request_id"`
		RemoteHost      *string         `json:"remote_host"`
		RemotePort      *int            `json:"remote_port"`
		RemoteBlockIDs  json.RawMessage `json:"remote_block_ids"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		return p, invalidRequest("kv_transfer_params", "kv_transfer_params: %v", err)
	}
	p.present = true
	p.DoRemoteDecode = wire.DoRemoteDecode != nil && *wire.DoRemoteDecode
	p.DoRemotePrefill = wire.DoRemotePrefill != nil && *wire.DoRemotePrefill
	if p.DoRemoteDecode && p.DoRemotePrefill {
		return p, invalidRequest("kv_transfer_params", "kv_transfer_params: do_remote_decode and do_remote_prefill are both true")
	}
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	p.RemoteEngineID, p.RemoteRequestID, p.RemoteHost = deref(wire.RemoteEngineID), deref(wire.RemoteRequestID), deref(wire.RemoteHost)
	if wire.RemotePort != nil {
		if *wire.RemotePort < 0 || *wire.RemotePort > math.MaxUint16 {
			return p, invalidRequest("kv_transfer_params.remote_port", "kv_transfer_params.remote_port: %d is not a port", *wire.RemotePort)
		}
		p.RemotePort = *wire.RemotePort
	}
	ids, err := parseBlockIDs(wire.RemoteBlockIDs)
	if err != nil {
		return p, invalidRequest("kv_transfer_params.remote_block_ids", "kv_transfer_params.remote_block_ids: %v", err)
	}
	p.RemoteBlockIDs = ids
	return p, nil
}

func parseBlockIDs(raw json.RawMessage) ([]int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var flat []int64
	if err := json.Unmarshal(raw, &flat); err == nil {
		if len(flat) > maxRemoteBlockIDs {
			return nil, fmt.Errorf("%d ids, over the limit of %d", len(flat), maxRemoteBlockIDs)
		}
		return flat, nil
	}
	// Unmarshal leaves a partial result behind on failure.
	flat = nil
	var groups [][]int64
	if err := json.Unmarshal(raw, &groups); err != nil {
		return nil, fmt.Errorf("want a list of block ids or a list of such lists")
	}
	for _, g := range groups {
		if len(flat)+len(g) > maxRemoteBlockIDs {
			return nil, fmt.Errorf("over the limit of %d ids", maxRemoteBlockIDs)
		}
		flat = append(flat, g...)
	}
	return flat, nil
}

// prefillResponseParams is what a prefill worker returns: the decoder's
// instructions for fetching the blocks (NixlConnectorScheduler.request_finished).
func prefillResponseParams(blockIDs []int64, engineID, requestID, host string, port int) map[string]any {
	if blockIDs == nil {
		blockIDs = []int64{}
	}
	return map[string]any{
		"do_remote_prefill": true,
		"do_remote_decode":  false,
		"remote_block_ids":  blockIDs,
		"remote_engine_id":  engineID,
		"remote_request_id": requestID,
		"remote_host":       host,
		"remote_port":       port,
		"tp_size":           1,
	}
}

// TransferModel prices a KV transfer from a prefill worker.
type TransferModel struct {
	BytesPerToken int64   // KV bytes per token (all layers, K and V)
	Gbps          float64 // link bandwidth, gigabits per second
}

// Duration is the simulated wall time to move tokens' KV: bytes over the
// link's bandwidth. A zero bandwidth means an instant transfer.
func (m TransferModel) Duration(tokens int) time.Duration {
	if tokens <= 0 || m.Gbps <= 0 || m.BytesPerToken <= 0 {
		return 0
	}
	seconds := float64(tokens) * float64(m.BytesPerToken) * 8 / (m.Gbps * 1e9)
	return time.Duration(seconds * float64(time.Second))
}
