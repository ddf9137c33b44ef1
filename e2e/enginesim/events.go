package enginesim

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/kvgate/kvgate/indexer/kvevents"
	"github.com/kvgate/kvgate/indexer/kvstream"
)

// EventsConfig configures KV-event publishing (vLLM's KVEventsConfig).
type EventsConfig struct {
	// Endpoint is the ZMQ PUB endpoint of data-parallel rank 0; empty
	// disables publishing. Rank r binds port+r, as vLLM's
	// ZmqEventPublisher.offset_endpoint_port does.
	Endpoint string
	// ReplayEndpoint is the ROUTER replay endpoint of rank 0 (offset the
	// same way); empty disables replay.
	ReplayEndpoint string
	Topic          string
	Encoding       kvevents.Encoding
}

// ParseEncoding reads a --kv-events-encoding value.
func ParseEncoding(s string) (kvevents.Encoding, error) {
	switch s {
	case "array":
		return kvevents.EncodingArray, nil
	case "map":
		return kvevents.EncodingMap, nil
	}
	return 0, fmt.Errorf("kv events encoding %q: want array or map", s)
}

// eventPublisher turns the core's events into vLLM EventBatches, one batch
// per engine step with seq counting per batch (the kvstream.Publisher
// assigns it), and publishes them.
type eventPublisher struct {
	pub      *kvstream.Publisher
	encoding kvevents.Encoding
	dpRank   int
	log      *slog.Logger

	batches  atomic.Int64
	events   atomic.Int64
	failures atomic.Int64
}

func newEventPublisher(cfg EventsConfig, dpRank int, log *slog.Logger) (*eventPublisher, error) {
	ep, err := offsetEndpointPort(cfg.Endpoint, dpRank)
	if err != nil {
		return nil, fmt.Errorf("kv events endpoint: %w", err)
	}
	var rep string
	if cfg.ReplayEndpoint != "" {
		if rep, err = offsetEndpointPort(cfg.ReplayEndpoint, dpRank); err != nil {
			return nil, fmt.Errorf("kv events replay endpoint: %w", err)
		}
	}
	pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: ep, ReplayEndpoint: rep, Topic: cfg.Topic, Logger: log})
	if err != nil {
		return nil, err
	}
	return &eventPublisher{pub: pub, encoding: cfg.Encoding, dpRank: dpRank, log: log}, nil
}

// publish sends one step's events as one batch. A failure is counted and
// kept for Stats rather than returned: the engine keeps serving, and
// subscribers repair the gap by replay as they would with vLLM.
func (p *eventPublisher) publish(b kvevents.Batch) {
	if len(b.Events) == 0 {
		return
	}
	// vLLM always writes data_parallel_rank (0 without DP).
	b.DPRank, b.HasDPRank = p.dpRank, true
	payload, err := kvevents.Encode(b, p.encoding)
	if err == nil {
		_, err = p.pub.Publish(payload)
	}
	if err != nil {
		p.failures.Add(1)
		p.log.Warn("publishing KV events", "err", err)
		return
	}
	p.batches.Add(1)
	p.events.Add(int64(len(b.Events)))
}

func (p *eventPublisher) close() error { return p.pub.Close() }

// offsetEndpointPort adds rank to a tcp endpoint's port, as vLLM does for
// data-parallel ranks; other transports (ipc, inproc) get a "_dp<rank>"
// suffix there too. Port 0 (pick any) stays 0.
func offsetEndpointPort(endpoint string, rank int) (string, error) {
	if rank == 0 || endpoint == "" {
		return endpoint, nil
	}
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("%q: %w", endpoint, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%q: bad port %q", endpoint, port)
	}
	if n == 0 {
		return endpoint, nil
	}
	if n+rank > 65535 {
		return "", fmt.Errorf("%q: port %d + rank %d is beyond 65535", endpoint, n, rank)
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(n+rank)), nil
}
