package envoyharness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"
)

// The P/D routing sidecar, as llm-d runs it next to each decode worker
// (llm-d-routing-sidecar, NIXL v2 connector; wire-formats §3): when the
// picker named a prefill worker in x-prefiller-host-port, the request goes
// first to that worker with kv_transfer_params {do_remote_decode: true},
// max_tokens 1 and stream false; the kv_transfer_params it answers with are
// then passed to the decode worker, which pulls the prompt's KV instead of
// computing it.
//
// Cancellation: the prefill leg runs under the client's context, so a
// client that leaves during prefill aborts it on the prefill worker. Once
// the prefill has answered, its blocks are held for the decoder; if the
// client is gone by then the decode leg is still delivered — and dropped as
// soon as it is written — so that the decode worker, seeing the request
// aborted before its KV arrived, tells the prefill worker to free the
// blocks now (vLLM frees them so) rather than after the hold timeout.

const prefillerHeader = "x-prefiller-host-port"

// maxPrefillResponseBytes bounds what the sidecar reads of a prefill answer
// (one token and the transfer parameters).
const maxPrefillResponseBytes = 16 << 20

// prefillFirst runs the prefill leg on prefiller and returns the decode
// leg's body. An error with ctx done means the client left.
func (p *Proxy) prefillFirst(ctx context.Context, client *http.Client, f *Forwarded, prefiller string) ([]byte, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(f.Body, &req); err != nil || req == nil {
		return nil, fmt.Errorf("p/d sidecar: request body is not a JSON object")
	}
	pre := make(map[string]json.RawMessage, len(req)+2)
	for k, v := range req {
		pre[k] = v
	}
	pre["kv_transfer_params"] = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	pre["max_tokens"] = json.RawMessage("1")
	if _, ok := pre["max_completion_tokens"]; ok {
		pre["max_completion_tokens"] = json.RawMessage("1")
	}
	pre["stream"] = json.RawMessage("false")
	delete(pre, "stream_options")
	body, err := json.Marshal(pre)
	if err != nil {
		return nil, fmt.Errorf("p/d sidecar: %w", err)
	}
	path, _ := Get(f.Headers, ":path")
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+prefiller+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("p/d sidecar: prefill request: %w", err)
	}
	hreq.Header.Set("content-type", "application/json")
	if id, ok := Get(f.Headers, "x-request-id"); ok {
		hreq.Header.Set("x-request-id", id)
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("p/d sidecar: prefill on %s: %w", prefiller, err)
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillResponseBytes+1))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("p/d sidecar: prefill answer from %s: %w", prefiller, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("p/d sidecar: prefill on %s: status %d: %.200s", prefiller, resp.StatusCode, out)
	}
	if len(out) > maxPrefillResponseBytes {
		return nil, fmt.Errorf("p/d sidecar: prefill answer from %s over %d bytes", prefiller, maxPrefillResponseBytes)
	}
	var answer struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(out, &answer); err != nil || len(answer.KVTransferParams) == 0 || string(answer.KVTransferParams) == "null" {
		return nil, fmt.Errorf("p/d sidecar: prefill answer from %s has no kv_transfer_params", prefiller)
	}
	req["kv_transfer_params"] = answer.KVTransferParams
	decodeBody, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("p/d sidecar: %w", err)
	}
	if ctx.Err() != nil {
		p.abandonDecode(client, f, decodeBody)
		return nil, ctx.Err()
	}
	return decodeBody, nil
}

// abandonDecode delivers the decode leg of a request whose client already
// left and drops it once written: the decode worker aborts it before its
// KV transfer and, as vLLM's connector does, releases the prefill
// worker's blocks at once.
func (p *Proxy) abandonDecode(client *http.Client, f *Forwarded, body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { cancel() }})
	path, _ := Get(f.Headers, ":path")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.Upstream+path, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("content-type", "application/json")
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	p.log.Debug("p/d sidecar: client left after prefill; decode leg delivered and dropped", "decode", f.Upstream)
}

// withBody returns f with its body replaced (content-length follows).
func withBody(f *Forwarded, body []byte) *Forwarded {
	out := *f
	out.Body = body
	out.Headers = make([]Header, 0, len(f.Headers))
	for _, h := range f.Headers {
		if strings.EqualFold(h.Name, "content-length") {
			h.Value = fmt.Sprint(len(body))
		}
		out.Headers = append(out.Headers, h)
	}
	return &out
}
