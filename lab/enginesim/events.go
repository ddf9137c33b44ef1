package enginesim

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvstream"
)

// EventsConfig configures KV-event publishing (vLLM's KVEventsConfig).
// The zero value of each layout field is what vLLM v0.26 sends.
type EventsConfig struct {
	// Endpoint is the ZMQ PUB endpoint of data-parallel rank 0; empty
	// disables publishing. Rank r binds port+r, as vLLM's
	// ZmqEventPublisher.offset_endpoint_port does.
	Endpoint string
	// Connect dials Endpoint instead of binding it (vLLM with an endpoint
	// without a wildcard): for an indexer in bind mode.
	Connect bool
	// ReplayEndpoint is the ROUTER replay endpoint of rank 0 (offset the
	// same way); empty disables replay.
	ReplayEndpoint string
	Topic          string
	Encoding       EventEncoding
	// ReplayLayout: kvstream.ReplayWithTopic (v0.26) or ReplayLegacy.
	ReplayLayout kvstream.ReplayLayout
	// LegacyFields leaves out what only current vLLM writes (group_idx,
	// kv_cache_spec_kind; the salt stays in extra_keys): a release before
	// PR #40984.
	LegacyFields bool
	// HybridGroups publishes every store and removal a second time for a
	// sliding-window KV-cache group with the same engine hashes, as a
	// hybrid model does (vLLM PR #37688). The engine's cache is the
	// full-attention group's (group 0).
	HybridGroups bool
	// OffloadPlaceholders follows every GPU store with the CPU copy's
	// announcement the OffloadingConnector makes without
	// self_describing_kv_events (vllm#43468): same hashes, token_ids [],
	// block_size 0, medium CPU.
	OffloadPlaceholders bool
	// SkipLive lists batch sequence numbers kept for replay but not sent
	// live: a forced gap the subscriber must repair (test hook).
	SkipLive []uint64
}

// EventEncoding is the msgpack layout of the published batches; the zero
// value is vLLM v0.26's.
type EventEncoding uint8

const (
	// EncodingV026: the batch an array, events tagged maps (vLLM v0.26).
	EncodingV026 EventEncoding = iota
	// EncodingArrayLike: msgspec array_like everywhere (vLLM before PR
	// #42892, SGLang before #37482).
	EncodingArrayLike
	// EncodingMapBatch: batch and events maps (vLLM main between #42892
	// and v0.26).
	EncodingMapBatch
	// EncodingTRTLLM: TensorRT-LLM's own event list
	// (kvevents.FormatTRTLLM), read by engines configured with kind:
	// trtllm. No vLLM group metadata or placeholders are added.
	EncodingTRTLLM
)

func (e EventEncoding) wire() kvevents.Encoding {
	switch e {
	case EncodingArrayLike:
		return kvevents.EncodingArray
	case EncodingMapBatch:
		return kvevents.EncodingMapBatch
	}
	return kvevents.EncodingMap
}

// ParseEncoding reads a --kv-events-encoding value.
func ParseEncoding(s string) (EventEncoding, error) {
	switch s {
	case "map", "v0.26":
		return EncodingV026, nil
	case "array":
		return EncodingArrayLike, nil
	case "mapbatch":
		return EncodingMapBatch, nil
	case "trtllm":
		return EncodingTRTLLM, nil
	}
	return 0, fmt.Errorf("kv events encoding %q: want map (vLLM v0.26: array batch, map events), array (msgspec array_like), mapbatch or trtllm (TensorRT-LLM's event list)", s)
}

// eventPublisher turns the core's events into vLLM EventBatches, one batch
// per engine step with seq counting per batch (the kvstream.Publisher
// assigns it), and publishes them.
type eventPublisher struct {
	pub      *kvstream.Publisher
	encoding kvevents.Encoding
	cfg      EventsConfig
	dpRank   int
	log      *slog.Logger

	seq      uint64 // next batch's sequence number (publish is called from one goroutine)
	eventID  int64  // next TensorRT-LLM event_id
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
	pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: ep, Connect: cfg.Connect, ReplayEndpoint: rep,
		Topic: cfg.Topic, ReplayLayout: cfg.ReplayLayout, Logger: log})
	if err != nil {
		return nil, err
	}
	return &eventPublisher{pub: pub, encoding: cfg.Encoding.wire(), cfg: cfg, dpRank: dpRank, log: log}, nil
}

// vLLM's group metadata (vllm/distributed/kv_events.py; kthena#1535 shows a
// v0.26.0 store with group_idx 0 and kv_cache_spec_kind "full_attention").
const (
	mainGroupKind    = "full_attention"
	windowGroupKind  = "sliding_window"
	placeholderMedia = "CPU"
)

// shape rewrites the core's events into what the configured vLLM release
// puts on the wire: group metadata, a hybrid model's second group, offload
// placeholders.
func (p *eventPublisher) shape(in []kvevents.Event) []kvevents.Event {
	if p.cfg.LegacyFields && !p.cfg.HybridGroups && !p.cfg.OffloadPlaceholders {
		return in
	}
	out := make([]kvevents.Event, 0, len(in))
	for _, ev := range in {
		if !p.cfg.LegacyFields && ev.Kind != kvevents.AllBlocksCleared {
			ev.GroupIdx, ev.HasGroupIdx = 0, true
			if ev.Kind == kvevents.BlockStored {
				ev.SpecKind = mainGroupKind
			}
		}
		out = append(out, ev)
		if p.cfg.HybridGroups && ev.Kind != kvevents.AllBlocksCleared {
			w := ev
			w.GroupIdx, w.HasGroupIdx = 1, true
			if w.Kind == kvevents.BlockStored {
				// A sliding-window group keeps only the last window's
				// blocks in a real engine; announcing them all is the
				// harder case for the consumer (every hash shared).
				w.SpecKind = windowGroupKind
				w.CacheSalt = ev.CacheSalt
			}
			out = append(out, w)
		}
		if p.cfg.OffloadPlaceholders && ev.Kind == kvevents.BlockStored && (ev.Medium == "" || ev.Medium == "GPU") {
			out = append(out, kvevents.Event{Kind: kvevents.BlockStored, BlockHashes: ev.BlockHashes, Medium: placeholderMedia})
		}
	}
	return out
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
	var payload []byte
	var err error
	if p.cfg.Encoding == EncodingTRTLLM {
		b.Events = trtllmExpressible(b.Events)
		payload, err = kvevents.EncodeTRTLLM(b, p.eventID)
		p.eventID += int64(len(b.Events))
	} else {
		b.Events = p.shape(b.Events)
		payload, err = kvevents.Encode(b, p.encoding)
	}
	if err == nil {
		seq := p.seq
		p.seq++
		if slices.Contains(p.cfg.SkipLive, seq) {
			_, err = p.pub.PublishSkippingLive(payload)
		} else {
			_, err = p.pub.Publish(payload)
		}
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

// trtllmExpressible drops the events TensorRT-LLM's serializer cannot
// carry: a LoRA adapter's blocks (KVCacheEventSerializer leaves lora_id
// out, "TODO ... enable serialization of lora_id", tensorrt_llm/_utils.py at
// ed53795b33fc139493f762a1c6c53f691cf52d38) and salted ones (it has no
// salt). A consumer of the real engine cannot see them either.
func trtllmExpressible(in []kvevents.Event) []kvevents.Event {
	out := in[:0:0]
	for _, ev := range in {
		if ev.Kind == kvevents.BlockStored && (ev.LoRAName != "" || ev.HasLoRAID || ev.CacheSalt != "") {
			continue
		}
		ev.LoRAName, ev.HasLoRAID, ev.LoRAID = "", false, 0
		out = append(out, ev)
	}
	return out
}

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
