package kvevents

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding selects the wire shape Encode produces.
type Encoding uint8

const (
	// EncodingArray is msgspec's array_like=True, omit_defaults=True,
	// tag=True layout (vLLM before the map form): batch [ts, events,
	// dp_rank?], events ["Tag", fields...] with trailing defaults dropped.
	EncodingArray Encoding = iota
	// EncodingMap is the same structs without array_like: maps, the tag
	// under "type" first, fields in declaration order, defaults dropped.
	EncodingMap
)

// Encode writes b as vLLM's msgspec encoder would for the current schema
// (vllm/distributed/kv_events.py): lora_id, medium and lora_name have no
// default there and are always written (nil when unset); extra_keys,
// group_idx and the kv_cache_spec fields default to None and are left out
// (GroupIdx 0 counts as unset). Hashes are written as unsigned integers.
func Encode(b Batch, enc Encoding) ([]byte, error) {
	if enc != EncodingArray && enc != EncodingMap {
		return nil, fmt.Errorf("kvevents: unknown encoding %d", enc)
	}
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	w := &writer{e: e, asMap: enc == EncodingMap}
	w.batch(b)
	if w.err != nil {
		return nil, fmt.Errorf("kvevents: encode: %w", w.err)
	}
	return buf.Bytes(), nil
}

// writer keeps the first error so that the layout code reads linearly.
type writer struct {
	e     *msgpack.Encoder
	asMap bool
	err   error
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
	if b.HasDPRank {
		w.key("data_parallel_rank")
		w.do(w.e.EncodeInt(int64(b.DPRank)))
	}
}

func (w *writer) event(ev *Event) error {
	switch ev.Kind {
	case BlockStored:
		// tag + 7 fields without defaults; group_idx needs extra_keys
		// (nil) before it in the array form.
		n := 8
		if ev.GroupIdx != 0 {
			n = 10
			if w.asMap {
				n = 9
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
		w.optString("lora_name", ev.LoRAName)
		if ev.GroupIdx != 0 {
			if !w.asMap {
				w.do(w.e.EncodeNil()) // extra_keys
			}
			w.key("group_idx")
			w.do(w.e.EncodeInt(int64(ev.GroupIdx)))
		}
	case BlockRemoved:
		n := 3
		if ev.GroupIdx != 0 {
			n = 4
		}
		w.tagged(n, ev.Kind)
		w.key("block_hashes")
		w.hashes(ev.BlockHashes)
		w.optString("medium", ev.Medium)
		if ev.GroupIdx != 0 {
			w.key("group_idx")
			w.do(w.e.EncodeInt(int64(ev.GroupIdx)))
		}
	case AllBlocksCleared:
		w.tagged(1, ev.Kind)
	default:
		return fmt.Errorf("unknown event kind %d", ev.Kind)
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
