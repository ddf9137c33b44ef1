// Package enginetokenize is the network side of engine-side rendering
// (models[].preprocess.mode: engine): one POST /tokenize to one of the
// fleet's vLLM engines. What to send, how long to wait, how many calls at
// once and what an answer means are extproc/preprocess's (engine_render.go);
// this package only carries the bytes, so that the request path's pure core
// links no networking (internal/importrules TestPureCoreLinksNoIO).
package enginetokenize

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Client posts /tokenize bodies to engines. Safe for concurrent use.
type Client struct {
	http *http.Client
}

// New returns a client whose connections dial within dialTimeout and keep
// up to idlePerHost idle connections to each engine (the calls in flight
// are bounded by the caller: extproc.preprocess.engine.max_concurrent).
func New(dialTimeout time.Duration, idlePerHost int) *Client {
	return &Client{http: &http.Client{
		Transport: &http.Transport{
			// The engines are the fleet's own: no proxy from the
			// environment, no compression to undo.
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
			MaxIdleConnsPerHost: idlePerHost,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		// An engine's answer is its own; a redirect elsewhere is not
		// followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// PostTokenize sends body to http://endpoint/tokenize (vLLM's route,
// vllm/entrypoints/serve/tokenize/api_router.py at
// b91ee1b47c8e8462ada5e5b8d18244bc96a0ebbc) and returns the status and the
// answer's body, read up to limit+1 bytes so that the caller can tell an
// answer past its bound. The request is a fresh one: none of the client's
// headers (its credentials above all) reach the engine on this path. err
// is set when no answer came (a refused connection, ctx's deadline or
// cancellation, a broken read).
func (c *Client) PostTokenize(ctx context.Context, endpoint string, body []byte, limit int64) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+endpoint+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("tokenize request to %s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("tokenize call to %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Only the status matters then; the connection is reused after
		// a bounded drain.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return resp.StatusCode, nil, nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("tokenize answer from %s: %w", endpoint, err)
	}
	return resp.StatusCode, raw, nil
}
