package kvevents

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// EncodeTRTLLM writes b as TensorRT-LLM's event list (FormatTRTLLM), the
// dicts KVCacheEventSerializer builds, keys in its order: BlockStored as a
// "stored" event with one stored_block per BlockSize tokens (cache_level 0,
// or 1 for Medium "CPU" — "GPU" and "" are level 0; priority 35, the engine's default retention
// priority; token_extra_id 0), BlockRemoved as "removed", AllBlocksCleared
// as "created" (a made cache: TensorRT-LLM has no clear event). event_id
// counts from firstID; window_size is the block span as a stand-in;
// attention_dp_rank is written when b.HasDPRank. Only what FormatTRTLLM
// decodes back is expressible: a LoRA, a salt, a group index or an Err
// event gives ErrNotEncodable.
func EncodeTRTLLM(b Batch, firstID int64) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	w := &writer{e: e, asMap: true} // every TensorRT-LLM value is a map
	w.do(e.EncodeArrayLen(len(b.Events)))
	for i := range b.Events {
		ev := &b.Events[i]
		if ev.Err != nil || ev.HasLoRAID || ev.LoRAName != "" || ev.CacheSalt != "" || ev.HasGroupIdx || (ev.Medium != "" && ev.Medium != "GPU" && ev.Medium != "CPU") {
			return nil, ErrNotEncodable
		}
		n := 3
		if b.HasDPRank {
			n = 4
		}
		w.do(e.EncodeMapLen(n))
		w.key("event_id")
		w.do(e.EncodeInt(firstID + int64(i)))
		w.key("data")
		if err := w.trtllmData(ev); err != nil {
			return nil, err
		}
		w.key("window_size")
		w.do(e.EncodeInt(int64(ev.BlockSize)))
		if b.HasDPRank {
			w.key("attention_dp_rank")
			w.do(e.EncodeInt(int64(b.DPRank)))
		}
	}
	if w.err != nil {
		return nil, fmt.Errorf("kvevents: encode: %w", w.err)
	}
	return buf.Bytes(), nil
}

func (w *writer) trtllmData(ev *Event) error {
	e := w.e
	switch ev.Kind {
	case AllBlocksCleared:
		w.do(e.EncodeMapLen(2))
		w.key("type")
		w.do(e.EncodeString("created"))
		w.key("num_blocks_per_cache_level")
		w.do(e.EncodeArrayLen(0))
	case BlockRemoved:
		w.do(e.EncodeMapLen(2))
		w.key("type")
		w.do(e.EncodeString("removed"))
		w.key("block_hashes")
		w.hashes(ev.BlockHashes)
	case BlockStored:
		if ev.BlockSize <= 0 || len(ev.BlockHashes) == 0 || len(ev.TokenIDs) != ev.BlockSize*len(ev.BlockHashes) {
			return ErrNotEncodable
		}
		level := int64(0)
		if ev.Medium == "CPU" {
			level = 1
		}
		w.do(e.EncodeMapLen(3))
		w.key("type")
		w.do(e.EncodeString("stored"))
		w.key("parent_hash")
		if ev.HasParent {
			w.do(e.EncodeUint(ev.ParentHash))
		} else {
			w.do(e.EncodeNil())
		}
		w.key("blocks")
		w.do(e.EncodeArrayLen(len(ev.BlockHashes)))
		for i, h := range ev.BlockHashes {
			w.do(e.EncodeMapLen(5))
			w.key("type")
			w.do(e.EncodeString("stored_block"))
			w.key("block_hash")
			w.do(e.EncodeUint(h))
			w.key("tokens")
			toks := ev.TokenIDs[i*ev.BlockSize : (i+1)*ev.BlockSize]
			w.do(e.EncodeArrayLen(len(toks)))
			for _, t := range toks {
				w.do(e.EncodeMapLen(3))
				w.key("type")
				w.do(e.EncodeString("unique_token"))
				w.key("token_id")
				w.do(e.EncodeUint(uint64(t)))
				w.key("token_extra_id")
				w.do(e.EncodeUint(0))
			}
			w.key("cache_level")
			w.do(e.EncodeInt(level))
			w.key("priority")
			w.do(e.EncodeInt(35))
		}
	default:
		return ErrNotEncodable
	}
	return nil
}
