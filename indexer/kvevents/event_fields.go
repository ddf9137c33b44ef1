package kvevents

import (
	"errors"
	"fmt"
	"math"
)

// field is one named event field, in vLLM's declaration order.
type field uint8

const (
	fBlockHashes field = iota
	fParentBlockHash
	fTokenIDs
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroupIdx
	fSpecKind
	fSpecSlidingWindow
	numFields
)

var fieldNames = [numFields]string{
	"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
	"medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
	"kv_cache_spec_sliding_window",
}

func (f field) String() string { return fieldNames[f] }

// Positional layouts after the tag (vllm/distributed/kv_events.py, field
// declaration order). Older producers stop earlier: SGLang and the first
// vLLM releases end BlockStored at lora_id and BlockRemoved at
// block_hashes; msgspec's omit_defaults drops trailing defaulted fields.
var (
	storedOrder  = []field{fBlockHashes, fParentBlockHash, fTokenIDs, fBlockSize, fLoRAID, fMedium, fLoRAName, fExtraKeys, fGroupIdx, fSpecKind, fSpecSlidingWindow}
	removedOrder = []field{fBlockHashes, fMedium, fGroupIdx}
)

// required fields per kind; every other field may be absent (older
// producers) or nil. parent_block_hash is required by vLLM's schema but
// absent means the same as nil, so it is accepted.
var requiredFields = map[Kind]uint32{
	BlockStored:  1<<fBlockHashes | 1<<fTokenIDs | 1<<fBlockSize,
	BlockRemoved: 1 << fBlockHashes,
}

func fieldsOf(k Kind) uint32 {
	var order []field
	switch k {
	case BlockStored:
		order = storedOrder
	case BlockRemoved:
		order = removedOrder
	}
	var m uint32
	for _, f := range order {
		m |= 1 << f
	}
	return m
}

var kindFields = [...]uint32{BlockStored: fieldsOf(BlockStored), BlockRemoved: fieldsOf(BlockRemoved), AllBlocksCleared: 0}

func (dec *Decoder) kind() (Kind, error) {
	b, err := dec.readStrBytes(dec.lim.MaxStringBytes, false)
	if err != nil {
		return 0, fmt.Errorf("event type: %w", err)
	}
	switch string(b) {
	case "BlockStored":
		return BlockStored, nil
	case "BlockRemoved":
		return BlockRemoved, nil
	case "AllBlocksCleared":
		return AllBlocksCleared, nil
	}
	// An event kvgate does not understand may change what the engine
	// holds; skipping it could leave the index wrong, so the batch fails
	// and the caller resynchronises.
	return 0, fmt.Errorf("unknown event type %q", b)
}

// event decodes one event into ev (zeroed by the caller).
func (dec *Decoder) event(ev *Event) error {
	c, err := dec.peek()
	if err != nil {
		return err
	}
	var seen uint32
	switch {
	case isArray(c):
		n, err := dec.containerLen(c, 1)
		if err != nil {
			return err
		}
		if n < 1 {
			return errors.New("empty event array, want a type tag first")
		}
		if ev.Kind, err = dec.kind(); err != nil {
			return err
		}
		var order []field
		switch ev.Kind {
		case BlockStored:
			order = storedOrder
		case BlockRemoved:
			order = removedOrder
		}
		for i := 1; i < n; i++ {
			if i-1 >= len(order) {
				if err := dec.skip(); err != nil {
					return fmt.Errorf("field %d: %w", i, err)
				}
				continue
			}
			f := order[i-1]
			if err := dec.field(ev, f); err != nil {
				return fmt.Errorf("field %s: %w", f, err)
			}
			seen |= 1 << f
		}
	case isMap(c):
		n, err := dec.containerLen(c, 2)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			key, known, err := dec.key()
			if err != nil {
				return fmt.Errorf("key %d: %w", i, err)
			}
			if key == "type" {
				if ev.Kind != 0 {
					return dup(true, key)
				}
				if ev.Kind, err = dec.kind(); err != nil {
					return err
				}
				continue
			}
			f := fieldByName(key)
			// A field of another kind is as unknown as a foreign key; when
			// "type" comes late every known field is decoded and the
			// foreign ones are dropped below.
			if !known || f == numFields || (ev.Kind != 0 && kindFields[ev.Kind]&(1<<f) == 0) {
				if err := dec.skip(); err != nil {
					return fmt.Errorf("key %d: value: %w", i, err)
				}
				continue
			}
			if seen&(1<<f) != 0 {
				return dup(true, key)
			}
			if err := dec.field(ev, f); err != nil {
				return fmt.Errorf("field %s: %w", f, err)
			}
			seen |= 1 << f
		}
		if ev.Kind == 0 {
			return errors.New("event map lacks \"type\"")
		}
		keep := kindFields[ev.Kind]
		seen &= keep
		dropForeign(ev, keep)
	default:
		return fmt.Errorf("event must be an array or a map, got %s", typeName(c))
	}
	if missing := requiredFields[ev.Kind] &^ seen; missing != 0 {
		for f := field(0); f < numFields; f++ {
			if missing&(1<<f) != 0 {
				return fmt.Errorf("missing field %s", f)
			}
		}
	}
	return nil
}

func fieldByName(name string) field {
	for f := field(0); f < numFields; f++ {
		if fieldNames[f] == name {
			return f
		}
	}
	return numFields
}

// dropForeign zeroes fields that do not belong to the event's kind.
func dropForeign(ev *Event, keep uint32) {
	has := func(f field) bool { return keep&(1<<f) != 0 }
	if !has(fBlockHashes) {
		ev.BlockHashes = nil
	}
	if !has(fParentBlockHash) {
		ev.ParentHash, ev.HasParent = 0, false
	}
	if !has(fTokenIDs) {
		ev.TokenIDs = nil
	}
	if !has(fBlockSize) {
		ev.BlockSize = 0
	}
	if !has(fLoRAID) {
		ev.LoRAID, ev.HasLoRAID = 0, false
	}
	if !has(fMedium) {
		ev.Medium = ""
	}
	if !has(fLoRAName) {
		ev.LoRAName = ""
	}
	if !has(fGroupIdx) {
		ev.GroupIdx = 0
	}
}

func (dec *Decoder) field(ev *Event, f field) error {
	var err error
	switch f {
	case fBlockHashes:
		ev.BlockHashes, err = dec.hashes()
	case fParentBlockHash:
		var null bool
		if null, err = dec.isNil(); err == nil && !null {
			ev.ParentHash, err = dec.hash()
			ev.HasParent = err == nil
		}
	case fTokenIDs:
		ev.TokenIDs, err = dec.tokens()
	case fBlockSize:
		ev.BlockSize, err = dec.readSmallInt(1, int64(dec.lim.MaxBlockSize))
	case fLoRAID:
		var null bool
		if null, err = dec.isNil(); err == nil && !null {
			ev.LoRAID, err = dec.readSmallInt(math.MinInt64, math.MaxInt64)
			ev.HasLoRAID = err == nil
		}
	case fMedium:
		ev.Medium, err = dec.optString()
	case fLoRAName:
		ev.LoRAName, err = dec.optString()
	case fGroupIdx:
		var null bool
		if null, err = dec.isNil(); err == nil && !null {
			ev.GroupIdx, err = dec.readSmallInt(0, math.MaxInt32)
		}
	default:
		// extra_keys and kv_cache_spec_*: routing does not use them
		// (hashes are recomputed from token_ids), but they must still be
		// well-formed.
		err = dec.skip()
	}
	return err
}
