package kvevents

import (
	"errors"
	"fmt"
	"io"
)

// Format is the wire format of an engine's KV-event payloads.
type Format uint8

const (
	// FormatVLLM is vLLM's EventBatch (see the package comment). SGLang
	// publishes it too, and so does Dynamo's TensorRT-LLM worker when it
	// republishes the engine's events over ZMQ (ai-dynamo/dynamo
	// components/src/dynamo/trtllm/publisher.py ZmqKvEventPublisher, commit
	// 0d38568995b54b8acc3a93f48452c4b7fccb6be0: [ts, [event], dp_rank] with
	// vLLM-style "BlockStored"/"BlockRemoved" maps).
	FormatVLLM Format = iota
	// FormatTRTLLM is TensorRT-LLM's own event list: what its KV cache
	// event manager hands out (LLM.get_kv_cache_events, trtllm-serve's
	// /kv_cache_events), one payload holding the list msgpack-encoded.
	// Each event is a map {"event_id", "data", "window_size",
	// "attention_dp_rank"?} as tensorrt_llm/_utils.py KVCacheEventSerializer
	// writes it (NVIDIA/TensorRT-LLM commit
	// ed53795b33fc139493f762a1c6c53f691cf52d38), data one of
	//
	//	{"type": "created", "num_blocks_per_cache_level": [...]}
	//	{"type": "stored", "parent_hash": h|None, "blocks": [
	//	    {"type": "stored_block", "block_hash": h, "tokens": [
	//	        {"type": "unique_token", "token_id": t, "token_extra_id": e}, ...],
	//	     "cache_level": l, "priority": p}, ...]}
	//	{"type": "removed", "block_hashes": [...]}
	//	{"type": "updated", "block_hash": h, "cache_level": diff, "priority": diff}
	FormatTRTLLM
)

// Engine kinds as the configuration names them (engines[].kind).
const (
	KindNameVLLM   = "vllm"
	KindNameSGLang = "sglang"
	KindNameTRTLLM = "trtllm"
)

// FormatOf maps an engine kind to the format its events arrive in: vLLM
// and SGLang (and "", the default) publish vLLM's EventBatch, TensorRT-LLM
// its own event list.
func FormatOf(kind string) (Format, error) {
	switch kind {
	case "", KindNameVLLM, KindNameSGLang:
		return FormatVLLM, nil
	case KindNameTRTLLM:
		return FormatTRTLLM, nil
	}
	return 0, fmt.Errorf("unknown engine kind %q (want %s, %s or %s)", kind, KindNameVLLM, KindNameSGLang, KindNameTRTLLM)
}

// NewFormatDecoder returns a Decoder for payloads in format f.
func NewFormatDecoder(f Format, lim Limits) *Decoder {
	dec := NewDecoder(lim)
	dec.format = f
	return dec
}

// errTRTLLMUpdated marks TensorRT-LLM's "updated" events: a block's
// priority or cache level changed. Neither changes which tokens the
// engine holds at the level kvgate indexes in the way it can apply, so
// they are skipped like any event kvgate cannot use.
var errTRTLLMUpdated = errors.New("TensorRT-LLM \"updated\" event (priority or cache level change) is not applied")

// trtllmBatch decodes one TensorRT-LLM event list. Mapping to kvgate's
// events:
//   - created: AllBlocksCleared. The engine emits one per cache level when
//     it makes its cache, which then holds nothing (a restarted engine).
//   - stored: BlockStored. parent_hash is the parent; the blocks' hashes and
//     token ids are concatenated; BlockSize is the first block's token
//     count. A shorter last block is a partial block, which the engine does
//     not reuse and Dynamo's publisher drops (publisher.py
//     partial_block_hashes): it is dropped here too. cache_level 0 is the
//     GPU (Medium ""), 1 the host ("CPU"). A token with a token_extra_id
//     (multimodal) makes the event unusable: the engine's hash then covers
//     ids kvgate does not see.
//   - removed: BlockRemoved.
//   - updated: skipped (Err set, errTRTLLMUpdated).
//
// attention_dp_rank is the batch's DPRank (Dynamo's publisher uses it as
// the data-parallel rank); event_id and window_size are not used.
// Approximate: a model with several attention windows (VSWA) publishes
// events per window; all are applied, where Dynamo keeps the largest
// window's only.
func (dec *Decoder) trtllmBatch() (Batch, error) {
	var b Batch
	c, err := dec.peek()
	if err != nil {
		return b, err
	}
	if !isArray(c) {
		return b, fmt.Errorf("TensorRT-LLM event list must be an array, got %s", typeName(c))
	}
	n, err := dec.containerLen(c, 1)
	if err != nil {
		return b, err
	}
	if n > dec.lim.MaxEvents {
		return b, fmt.Errorf("%d events exceed the limit of %d", n, dec.lim.MaxEvents)
	}
	b.Events = make([]Event, 0, min(n, dec.r.Len()/8+1))
	for i := 0; i < n; i++ {
		start := dec.offset()
		if c, err := dec.peek(); err != nil || !isMap(c) {
			// Not an event list at all (a vLLM batch is [ts, events, …]):
			// the payload fails rather than decoding to unusable events.
			if err == nil {
				err = fmt.Errorf("want an event map, got %s", typeName(c))
			}
			return b, fmt.Errorf("event %d: %w", i, err)
		}
		var ev Event
		rank, hasRank, err := dec.trtllmEvent(&ev)
		if err == nil && hasRank {
			if b.HasDPRank && b.DPRank != rank {
				err = fmt.Errorf("attention_dp_rank %d in a list of rank %d", rank, b.DPRank)
			}
			b.DPRank, b.HasDPRank = rank, true
		}
		if err != nil {
			err = fmt.Errorf("event %d: %w", i, err)
			// Step over a well-formed event kvgate cannot use; input that
			// is not msgpack fails the list.
			if _, serr := dec.r.Seek(int64(start), io.SeekStart); serr != nil {
				return b, err
			}
			if serr := dec.skipEvent(); serr != nil {
				return b, err
			}
			ev = Event{Kind: ev.Kind, Err: fmt.Errorf("byte %d: %w", start, err)}
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
}

// trtKey reads a map key of a TensorRT-LLM event.
func (dec *Decoder) trtKey() (string, error) {
	k, err := dec.readStrBytes(dec.lim.MaxStringBytes, false)
	if err != nil {
		return "", fmt.Errorf("map key: %w", err)
	}
	for _, known := range [...]string{"event_id", "data", "window_size", "attention_dp_rank", "type", "parent_hash",
		"blocks", "block_hashes", "block_hash", "tokens", "token_id", "token_extra_id", "cache_level"} {
		if string(k) == known {
			return known, nil
		}
	}
	return "", nil
}

// mapLen reads a map header.
func (dec *Decoder) mapLen(what string) (int, error) {
	c, err := dec.peek()
	if err != nil {
		return 0, err
	}
	if !isMap(c) {
		return 0, fmt.Errorf("%s: want a map, got %s", what, typeName(c))
	}
	return dec.containerLen(c, 2)
}

// arrayLen reads an array header of at most max elements.
func (dec *Decoder) arrayLen(what string, max int) (int, error) {
	c, err := dec.peek()
	if err != nil {
		return 0, err
	}
	if !isArray(c) {
		return 0, fmt.Errorf("%s: want an array, got %s", what, typeName(c))
	}
	n, err := dec.containerLen(c, 1)
	if err == nil && n > max {
		err = fmt.Errorf("%s: %d elements exceed the limit of %d", what, n, max)
	}
	return n, err
}

func (dec *Decoder) trtllmEvent(ev *Event) (rank int, hasRank bool, err error) {
	n, err := dec.mapLen("event")
	if err != nil {
		return 0, false, err
	}
	haveData := false
	for i := 0; i < n; i++ {
		key, err := dec.trtKey()
		if err != nil {
			return 0, false, err
		}
		switch key {
		case "data":
			haveData = true
			err = dec.trtllmData(ev)
		case "attention_dp_rank":
			var null bool
			if null, err = dec.isNil(); err == nil && !null {
				rank, err = dec.readSmallInt(0, 1<<20)
				hasRank = err == nil
			}
		default:
			err = dec.skip()
		}
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", key, err)
		}
	}
	if !haveData {
		return 0, false, errors.New("event has no data")
	}
	return rank, hasRank, nil
}

func (dec *Decoder) trtllmData(ev *Event) error {
	n, err := dec.mapLen("data")
	if err != nil {
		return err
	}
	typ := ""
	var blocks []trtBlock
	for i := 0; i < n; i++ {
		key, err := dec.trtKey()
		if err != nil {
			return err
		}
		switch key {
		case "type":
			var t []byte
			if t, err = dec.readStrBytes(dec.lim.MaxStringBytes, false); err == nil {
				typ = string(t)
				ev.Kind = trtllmKinds[typ]
			}
		case "parent_hash":
			var null bool
			if null, err = dec.isNil(); err == nil && !null {
				ev.ParentHash, err = dec.hash()
				ev.HasParent = err == nil
			}
		case "blocks":
			blocks, err = dec.trtllmBlocks()
		case "block_hashes":
			ev.BlockHashes, err = dec.hashes()
		default:
			err = dec.skip()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	switch typ {
	case "created":
		*ev = Event{Kind: AllBlocksCleared}
	case "removed":
		ev.Kind = BlockRemoved
		ev.ParentHash, ev.HasParent = 0, false
	case "stored":
		ev.Kind = BlockStored
		return storedFromBlocks(ev, blocks)
	case "updated":
		return errTRTLLMUpdated
	default:
		return fmt.Errorf("%w %q", ErrUnknownEventType, typ)
	}
	return nil
}

// trtllmKinds are the kvgate kinds of TensorRT-LLM's event types.
var trtllmKinds = map[string]Kind{"created": AllBlocksCleared, "stored": BlockStored, "removed": BlockRemoved}

// trtBlock is one stored block as TensorRT-LLM serializes it.
type trtBlock struct {
	hash   uint64
	tokens []uint32
	level  int
}

func (dec *Decoder) trtllmBlocks() ([]trtBlock, error) {
	n, err := dec.arrayLen("blocks", dec.lim.MaxHashesPerEvent)
	if err != nil {
		return nil, err
	}
	out := make([]trtBlock, 0, min(n, dec.r.Len()/8+1))
	total := 0
	for i := 0; i < n; i++ {
		blk, err := dec.trtllmBlock(&total)
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", i, err)
		}
		out = append(out, blk)
	}
	return out, nil
}

func (dec *Decoder) trtllmBlock(total *int) (trtBlock, error) {
	var blk trtBlock
	n, err := dec.mapLen("block")
	if err != nil {
		return blk, err
	}
	for i := 0; i < n; i++ {
		key, err := dec.trtKey()
		if err != nil {
			return blk, err
		}
		switch key {
		case "block_hash":
			blk.hash, err = dec.hash()
		case "tokens":
			blk.tokens, err = dec.trtllmTokens(total)
		case "cache_level":
			blk.level, err = dec.readSmallInt(0, 1)
		default:
			err = dec.skip()
		}
		if err != nil {
			return blk, fmt.Errorf("%s: %w", key, err)
		}
	}
	return blk, nil
}

func (dec *Decoder) trtllmTokens(total *int) ([]uint32, error) {
	n, err := dec.arrayLen("tokens", dec.lim.MaxBlockSize)
	if err != nil {
		return nil, err
	}
	if *total += n; *total > dec.lim.MaxTokensPerEvent {
		return nil, fmt.Errorf("more than %d tokens in one event", dec.lim.MaxTokensPerEvent)
	}
	out := make([]uint32, 0, n)
	for i := 0; i < n; i++ {
		m, err := dec.mapLen("token")
		if err != nil {
			return nil, err
		}
		id := -1
		for j := 0; j < m; j++ {
			key, err := dec.trtKey()
			if err != nil {
				return nil, err
			}
			switch key {
			case "token_id":
				id, err = dec.readSmallInt(0, 1<<32-1)
			case "token_extra_id":
				var extra int
				if extra, err = dec.readSmallInt(0, 1<<62); err == nil && extra != 0 {
					err = fmt.Errorf("token %d carries token_extra_id %d (multimodal): the engine's hash covers ids kvgate does not see", i, extra)
				}
			default:
				err = dec.skip()
			}
			if err != nil {
				return nil, fmt.Errorf("token %d: %s: %w", i, key, err)
			}
		}
		if id < 0 {
			return nil, fmt.Errorf("token %d has no token_id", i)
		}
		out = append(out, uint32(id))
	}
	return out, nil
}

// storedFromBlocks fills a BlockStored event from TensorRT-LLM's blocks.
func storedFromBlocks(ev *Event, blocks []trtBlock) error {
	if len(blocks) == 0 {
		return errors.New("stored event has no blocks")
	}
	size := len(blocks[0].tokens)
	if size == 0 {
		return errors.New("stored block has no tokens")
	}
	if last := blocks[len(blocks)-1]; len(blocks) > 1 && len(last.tokens) < size {
		blocks = blocks[:len(blocks)-1] // a partial block: never reused
	}
	ev.BlockSize = size
	ev.BlockHashes = make([]uint64, 0, len(blocks))
	ev.TokenIDs = make([]uint32, 0, size*len(blocks))
	for i, blk := range blocks {
		if len(blk.tokens) != size {
			return fmt.Errorf("block %d holds %d tokens, the first %d", i, len(blk.tokens), size)
		}
		if blk.level != blocks[0].level {
			return fmt.Errorf("block %d is at cache level %d, the first at %d", i, blk.level, blocks[0].level)
		}
		ev.BlockHashes = append(ev.BlockHashes, blk.hash)
		ev.TokenIDs = append(ev.TokenIDs, blk.tokens...)
	}
	if blocks[0].level == 1 {
		ev.Medium = "CPU"
	}
	return nil
}
