package kvevents

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding selects the wire shape Encode produces.
type Encoding uint8

const (
	// EncodingArray is msgspec's array_like=True, omit_defaults=True,
	// tag=True layout (vLLM before PR #42892, SGLang before #37482): batch
	// [ts, events, dp_rank?], events ["Tag", fields...] with trailing
	// defaults dropped.
	EncodingArray Encoding = iota
	// EncodingMap is what vLLM v0.26 sends (a dump from a v0.26.0 engine:
	// volcano-sh/kthena#1535): the batch stays a positional array
	// (EventBatch keeps array_like=True) and every event is a tagged map,
	// "type" first, fields in declaration order, defaults dropped.
	EncodingMap
	// EncodingMapBatch is vLLM main between PR #42892 and v0.26, which
	// dropped array_like from EventBatch too: the batch is a map
	// {"ts", "events", "data_parallel_rank"}.
	EncodingMapBatch
)

// ErrNotEncodable: the batch holds a combination of fields that no
// producer's layout can express (an event that is Err, say).
var ErrNotEncodable = errors.New("kvevents: not expressible in the chosen encoding")

// Encode writes b as the engines' msgspec encoders would for the current
// schema (vllm/distributed/kv_events.py): lora_id, medium and lora_name have
// no default there and are always written (nil when unset); extra_keys,
// group_idx, kv_cache_spec_kind and locality default to None and are left
// out when unset. Hashes are written as unsigned integers.
//
// A salt (CacheSalt) is written as vLLM does, in extra_keys of the first
// block (after the LoRA name: generate_block_hash_extra_keys), when the
// event starts a sequence; a salted continuation (vLLM never sends one, it
// puts the salt on the first block only) is written as SGLang does: the
// "cache_salt" key, or the metadata map at position 7.
func Encode(b Batch, enc Encoding) ([]byte, error) {
	if enc > EncodingMapBatch {
		return nil, fmt.Errorf("kvevents: unknown encoding %d", enc)
	}
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	w := &writer{e: e, eventMaps: enc != EncodingArray, batchMap: enc == EncodingMapBatch}
	w.batch(b)
	if w.err != nil {
		return nil, fmt.Errorf("kvevents: encode: %w", w.err)
	}
	return buf.Bytes(), nil
}

// writer keeps the first error so that the layout code reads linearly.
type writer struct {
	e         *msgpack.Encoder
	eventMaps bool
	batchMap  bool
	asMap     bool // the struct being written is a map
	err       error
}

func (w *writer) do(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) header(n int) {
	if w.asMap {
		w.do(w.e.EncodeMapLen(n))
	} else {
		w.do(w.e.EncodeArrayLen(n))
	}
}

func (w *writer) key(k string) {
	if w.asMap {
		w.do(w.e.EncodeString(k))
	}
}

func (w *writer) batch(b Batch) {
	n := 2
	if b.HasDPRank {
		n = 3
	}
	w.asMap = w.batchMap
	w.header(n)
	w.key("ts")
	w.do(w.e.EncodeFloat64(b.TS))
	w.key("events")
	w.do(w.e.EncodeArrayLen(len(b.Events)))
	for i := range b.Events {
		if err := w.event(&b.Events[i]); err != nil {
			w.do(fmt.Errorf("event %d: %w", i, err))
			return
		}
	}
	w.asMap = w.batchMap
	if b.HasDPRank {
		w.key("data_parallel_rank")
		w.do(w.e.EncodeInt(int64(b.DPRank)))
	}
}

// saltPlacement says where a stored event's CacheSalt goes.
type saltPlacement uint8

const (
	saltNone      saltPlacement = iota
	saltExtraKeys               // vLLM: first block's extra_keys
	saltExplicit                // SGLang: cache_salt key / position-7 map
)

func placeSalt(ev *Event) saltPlacement {
	switch {
	case ev.CacheSalt == "":
		return saltNone
	case !ev.HasParent && len(ev.BlockHashes) > 0 && !isHexDigest(ev.CacheSalt):
		return saltExtraKeys
	}
	return saltExplicit
}

func (w *writer) event(ev *Event) error {
	if ev.Err != nil {
		return fmt.Errorf("%w: an undecodable event (%v)", ErrNotEncodable, ev.Err)
	}
	w.asMap = w.eventMaps
	switch ev.Kind {
	case BlockStored:
		return w.stored(ev)
	case BlockRemoved:
		return w.removed(ev)
	case AllBlocksCleared:
		w.tagged(1, ev.Kind)
		return nil
	}
	return fmt.Errorf("unknown event kind %d", ev.Kind)
}

func (w *writer) stored(ev *Event) error {
	salt := placeSalt(ev)
	hasGroup := ev.HasGroupIdx || ev.GroupIdx != 0
	if salt == saltExplicit && !w.asMap && ev.LoRAName != "" {
		return fmt.Errorf("%w: a salted continuation of a LoRA sequence has no positional layout", ErrNotEncodable)
	}
	// Entries after the 7 that are always written (lora_id, medium and
	// lora_name have no default).
	var n int
	if w.asMap {
		n = 8 // tag + 7
		for _, set := range []bool{salt == saltExtraKeys, hasGroup, ev.SpecKind != "", ev.Locality != "", salt == saltExplicit} {
			if set {
				n++
			}
		}
	} else {
		// Positions 8.. are extra_keys, group_idx, kind, window, locality;
		// the array ends after the last one set.
		n = 8
		for i, set := range []bool{salt == saltExtraKeys, hasGroup, ev.SpecKind != "", false, ev.Locality != ""} {
			if set {
				n = 9 + i
			}
		}
	}
	w.tagged(n, ev.Kind)
	w.key("block_hashes")
	w.hashes(ev.BlockHashes)
	w.key("parent_block_hash")
	if ev.HasParent {
		w.do(w.e.EncodeUint(ev.ParentHash))
	} else {
		w.do(w.e.EncodeNil())
	}
	w.key("token_ids")
	w.do(w.e.EncodeArrayLen(len(ev.TokenIDs)))
	for _, t := range ev.TokenIDs {
		w.do(w.e.EncodeUint(uint64(t)))
	}
	w.key("block_size")
	w.do(w.e.EncodeInt(int64(ev.BlockSize)))
	w.key("lora_id")
	if ev.HasLoRAID {
		w.do(w.e.EncodeInt(int64(ev.LoRAID)))
	} else {
		w.do(w.e.EncodeNil())
	}
	w.optString("medium", ev.Medium)
	if !w.asMap && salt == saltExplicit {
		// sglang#30827 BlockStoredWithMetadata: {"cache_salt": …} in the
		// lora_name slot.
		w.do(w.e.EncodeMapLen(1))
		w.do(w.e.EncodeString("cache_salt"))
		w.do(w.e.EncodeString(ev.CacheSalt))
	} else {
		w.optString("lora_name", ev.LoRAName)
	}
	pos := 8
	slot := func(set bool, k string, write func()) {
		if w.asMap {
			if set {
				w.key(k)
				write()
			}
			return
		}
		if pos < n {
			if set {
				write()
			} else {
				w.do(w.e.EncodeNil())
			}
		}
		pos++
	}
	slot(salt == saltExtraKeys, "extra_keys", func() { w.extraKeys(ev) })
	slot(hasGroup, "group_idx", func() { w.do(w.e.EncodeInt(int64(ev.GroupIdx))) })
	slot(ev.SpecKind != "", "kv_cache_spec_kind", func() { w.do(w.e.EncodeString(ev.SpecKind)) })
	slot(false, "kv_cache_spec_sliding_window", nil)
	slot(ev.Locality != "", "locality", func() { w.do(w.e.EncodeString(ev.Locality)) })
	if w.asMap && salt == saltExplicit {
		w.key("cache_salt")
		w.do(w.e.EncodeString(ev.CacheSalt))
	}
	return nil
}

// extraKeys writes vLLM's per-block extra_keys with the salt on the first
// block: (lora_name, cache_salt), then None for every other block.
func (w *writer) extraKeys(ev *Event) {
	w.do(w.e.EncodeArrayLen(len(ev.BlockHashes)))
	first := []string{ev.CacheSalt}
	if ev.LoRAName != "" {
		first = []string{ev.LoRAName, ev.CacheSalt}
	}
	w.do(w.e.EncodeArrayLen(len(first)))
	for _, s := range first {
		w.do(w.e.EncodeString(s))
	}
	for range len(ev.BlockHashes) - 1 {
		w.do(w.e.EncodeNil())
	}
}

func (w *writer) removed(ev *Event) error {
	hasGroup := ev.HasGroupIdx || ev.GroupIdx != 0
	if !w.asMap && ev.SpecKind != "" && ev.Locality != "" {
		return fmt.Errorf("%w: a positional BlockRemoved has one slot for kv_cache_spec_kind or locality", ErrNotEncodable)
	}
	tail := ev.SpecKind
	if tail == "" {
		tail = ev.Locality
	}
	// The positional slot is read by value (decoder removedTail): only
	// LOCAL/REMOTE read back as a locality.
	if !w.asMap && tail != "" && isLocalityWord(tail) != (ev.Locality != "") {
		return fmt.Errorf("%w: positional BlockRemoved slot 4 value %q would read back as the other field", ErrNotEncodable, tail)
	}
	var n int
	if w.asMap {
		n = 3
		for _, set := range []bool{hasGroup, ev.SpecKind != "", ev.Locality != ""} {
			if set {
				n++
			}
		}
	} else {
		switch {
		case tail != "":
			n = 5
		case hasGroup:
			n = 4
		default:
			n = 3
		}
	}
	w.tagged(n, ev.Kind)
	w.key("block_hashes")
	w.hashes(ev.BlockHashes)
	w.optString("medium", ev.Medium)
	if w.asMap {
		if hasGroup {
			w.key("group_idx")
			w.do(w.e.EncodeInt(int64(ev.GroupIdx)))
		}
		if ev.SpecKind != "" {
			w.key("kv_cache_spec_kind")
			w.do(w.e.EncodeString(ev.SpecKind))
		}
		if ev.Locality != "" {
			w.key("locality")
			w.do(w.e.EncodeString(ev.Locality))
		}
		return nil
	}
	if n >= 4 {
		if hasGroup {
			w.do(w.e.EncodeInt(int64(ev.GroupIdx)))
		} else {
			w.do(w.e.EncodeNil())
		}
	}
	if n == 5 {
		w.do(w.e.EncodeString(tail))
	}
	return nil
}

// tagged writes the header of an event with n entries, the tag included.
func (w *writer) tagged(n int, k Kind) {
	w.header(n)
	w.key("type")
	w.do(w.e.EncodeString(k.String()))
}

func (w *writer) hashes(hs []uint64) {
	w.do(w.e.EncodeArrayLen(len(hs)))
	for _, h := range hs {
		w.do(w.e.EncodeUint(h))
	}
}

func (w *writer) optString(key, v string) {
	w.key(key)
	if v == "" {
		w.do(w.e.EncodeNil())
	} else {
		w.do(w.e.EncodeString(v))
	}
}
