package kvevents

import (
	"errors"
	"fmt"
	"math"
	"strings"
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
	fLocality
	fOwnership
	fCacheSalt
	numFields
)

var fieldNames = [numFields]string{
	"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
	"medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
	"kv_cache_spec_sliding_window", "locality", "ownership", "cache_salt",
}

func (f field) String() string { return fieldNames[f] }

// Positional layouts after the tag. BlockStored follows
// vllm/distributed/kv_events.py's declaration order (msgspec array_like
// writes fields in that order): block_hashes … lora_name, extra_keys,
// group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window, locality,
// ownership; ai-dynamo/dynamo lib/kv-router/src/zmq_wire/README.md
// documents the same prefix and tail. Older producers stop earlier (SGLang
// and the first vLLM releases end BlockStored at lora_id, v0.9 at medium;
// msgspec's omit_defaults drops trailing defaulted fields). Position 7
// (lora_name) is a metadata map {"cache_salt", "session_id"} in SGLang ≥
// 0.5.18 (sgl-project/sglang#30827, read by Dynamo's
// BlockStoredPositionSeven, zmq_wire/filter.rs).
//
// BlockRemoved's tail after group_idx differs between sources: Dynamo's
// README lists kv_cache_spec_kind and kv_cache_spec_sliding_window (vLLM
// PR #40984 kept them on removals), vLLM's current struct has locality and
// ownership there. Both are strings then an optional string or integer, so
// the slot is read by value (see removedTail).
var (
	storedOrder  = []field{fBlockHashes, fParentBlockHash, fTokenIDs, fBlockSize, fLoRAID, fMedium, fLoRAName, fExtraKeys, fGroupIdx, fSpecKind, fSpecSlidingWindow, fLocality, fOwnership}
	removedOrder = []field{fBlockHashes, fMedium, fGroupIdx, fSpecKind, fSpecSlidingWindow}
)

// required fields per kind; every other field may be absent (older
// producers) or nil. parent_block_hash is required by vLLM's schema but
// absent means the same as nil, so it is accepted.
var requiredFields = map[Kind]uint32{
	BlockStored:  1<<fBlockHashes | 1<<fTokenIDs | 1<<fBlockSize,
	BlockRemoved: 1 << fBlockHashes,
}

// kindFields: the fields each kind may carry, by name (maps) as well as by
// position. cache_salt is SGLang's named field; locality and ownership are
// vLLM's.
var kindFields = [...]uint32{
	BlockStored: 1<<fBlockHashes | 1<<fParentBlockHash | 1<<fTokenIDs | 1<<fBlockSize | 1<<fLoRAID |
		1<<fMedium | 1<<fLoRAName | 1<<fExtraKeys | 1<<fGroupIdx | 1<<fSpecKind | 1<<fSpecSlidingWindow |
		1<<fLocality | 1<<fOwnership | 1<<fCacheSalt,
	BlockRemoved:     1<<fBlockHashes | 1<<fMedium | 1<<fGroupIdx | 1<<fSpecKind | 1<<fSpecSlidingWindow | 1<<fLocality | 1<<fOwnership,
	AllBlocksCleared: 0,
}

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
	// Dynamo maps events it does not model to RawKvEvent::Ignored and
	// applies the rest of the batch (zmq_wire/convert.rs); failing the
	// whole batch would cost every other event in it.
	return 0, fmt.Errorf("%w %q", ErrUnknownEventType, truncateString(b))
}

func truncateString(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// eventScratch holds what an event's fields leave for resolving after the
// whole event is read: the first block's extra_keys strings and an
// explicit cache_salt.
type eventScratch struct {
	extraStrings []string
	explicitSalt bool   // cache_salt given as a field (SGLang)
	typedSalt    string // from a typed {"type": "cache_salt"} extra key
}

// event decodes one event into ev (zeroed by the caller).
func (dec *Decoder) event(ev *Event) error {
	c, err := dec.peek()
	if err != nil {
		return err
	}
	dec.es.extraStrings = dec.es.extraStrings[:0]
	dec.es.explicitSalt, dec.es.typedSalt = false, ""
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
			if ev.Kind == BlockRemoved && (f == fSpecKind || f == fSpecSlidingWindow) {
				f, err = dec.removedTail(ev, f)
			} else {
				err = dec.field(ev, f, true)
			}
			if err != nil {
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
			if err := dec.field(ev, f, false); err != nil {
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
	if ev.Kind == BlockStored && !dec.es.explicitSalt {
		if dec.es.typedSalt != "" {
			ev.CacheSalt = dec.es.typedSalt
		} else {
			ev.CacheSalt = saltFromExtraKeys(dec.es.extraStrings, ev.LoRAName, ev.HasParent)
		}
	}
	return nil
}

// saltFromExtraKeys finds vLLM's cache_salt among the first block's bare
// extra_keys strings. vllm/v1/core/kv_cache_utils.py
// generate_block_hash_extra_keys builds each block's keys as
// lora_extra_keys + mm_extra_keys + cache_salt_keys + prompt_embeds_keys,
// the salt only on the block that starts at token 0 (so only on an event
// without a parent). LoRA names and, before vLLM 0.19, multimodal
// identifiers (64-hex digests) are bare strings too; Dynamo's
// extra_keys_to_cache_namespace skips the first string equal to the LoRA
// name for the same reason, and its parse_mm_hash_from_extra_key treats
// 64-hex strings as multimodal. What is left last is the salt. (Dynamo
// itself only accepts salts it tagged "dynamo-cache-salt:" in its own
// frontend; kvgate forwards the client's cache_salt untouched, so the
// engine hashes, and announces, the bare value.)
func saltFromExtraKeys(strs []string, lora string, hasParent bool) string {
	if hasParent || len(strs) == 0 {
		return ""
	}
	salt := ""
	loraSkipped := lora == ""
	for _, s := range strs {
		switch {
		case !loraSkipped && s == lora:
			loraSkipped = true
		case isHexDigest(s):
		default:
			salt = s
		}
	}
	return salt
}

func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
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
		ev.GroupIdx, ev.HasGroupIdx = 0, false
	}
	if !has(fSpecKind) {
		ev.SpecKind = ""
	}
	if !has(fLocality) {
		ev.Locality = ""
	}
	if !has(fCacheSalt) {
		ev.CacheSalt = ""
	}
}

func (dec *Decoder) field(ev *Event, f field, positional bool) error {
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
		// 0 is what vLLM's OffloadingConnector writes on its placeholder
		// CPU/STORAGE stores (self_describing_kv_events false, vllm#43468);
		// ingest drops those one at a time.
		ev.BlockSize, err = dec.readSmallInt(0, int64(dec.lim.MaxBlockSize))
	case fLoRAID:
		var null bool
		if null, err = dec.isNil(); err == nil && !null {
			ev.LoRAID, err = dec.readSmallInt(math.MinInt64, math.MaxInt64)
			ev.HasLoRAID = err == nil
		}
	case fMedium:
		ev.Medium, err = dec.optString()
	case fLoRAName:
		if positional {
			err = dec.positionSeven(ev)
		} else {
			ev.LoRAName, err = dec.optString()
		}
	case fGroupIdx:
		var null bool
		if null, err = dec.isNil(); err == nil && !null {
			ev.GroupIdx, err = dec.readSmallInt(0, math.MaxInt32)
			ev.HasGroupIdx = err == nil
		}
	case fSpecKind:
		ev.SpecKind, err = dec.optString()
	case fLocality:
		ev.Locality, err = dec.optString()
	case fCacheSalt:
		ev.CacheSalt, err = dec.optString()
		dec.es.explicitSalt = err == nil && ev.CacheSalt != ""
	case fExtraKeys:
		err = dec.extraKeys()
	default:
		// kv_cache_spec_sliding_window, ownership: routing does not use
		// them, but they must still be well-formed.
		err = dec.skip()
	}
	return err
}

// removedTail reads BlockRemoved's positions 4 and 5, which hold
// kv_cache_spec_kind and kv_cache_spec_sliding_window in Dynamo's layout
// and locality and ownership in vLLM's struct order: a string naming a
// locality is one; any other string is the spec kind.
func (dec *Decoder) removedTail(ev *Event, f field) (field, error) {
	c, err := dec.peek()
	if err != nil {
		return f, err
	}
	if f == fSpecSlidingWindow || !isStr(c) {
		return f, dec.skip()
	}
	s, err := dec.optString()
	if err != nil {
		return f, err
	}
	if isLocalityWord(s) {
		ev.Locality = s
		return fLocality, nil
	}
	ev.SpecKind = s
	return f, nil
}

func isLocalityWord(s string) bool {
	switch strings.ToUpper(s) {
	case "LOCAL", "REMOTE":
		return true
	}
	return false
}

// positionSeven reads position 7 of a positional BlockStored: vLLM's
// lora_name (a string or nil) or SGLang's BlockStoredMetadata map
// {"cache_salt": str|nil, "session_id": …} (sglang#30827, #37482).
func (dec *Decoder) positionSeven(ev *Event) error {
	c, err := dec.peek()
	if err != nil {
		return err
	}
	if !isMap(c) {
		ev.LoRAName, err = dec.optString()
		return err
	}
	n, err := dec.containerLen(c, 2)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		key, known, err := dec.key()
		if err != nil {
			return fmt.Errorf("metadata key %d: %w", i, err)
		}
		if known && key == "cache_salt" {
			if ev.CacheSalt, err = dec.optString(); err != nil {
				return fmt.Errorf("metadata cache_salt: %w", err)
			}
			dec.es.explicitSalt = ev.CacheSalt != ""
			continue
		}
		if err := dec.skip(); err != nil {
			return fmt.Errorf("metadata key %d: value: %w", i, err)
		}
	}
	return nil
}

// extraKeys reads vLLM's extra_keys: nil, or one entry per block, each nil
// or a tuple (array) of keys. The first block's bare strings are kept for
// saltFromExtraKeys; a typed key {"type": "cache_salt", "salt": S} (the
// typed ExtraKey schema with event_version 1 proposed in vLLM PR #55488,
// closed unmerged; accepted in case a fork ships it) names the salt
// outright.
// Everything else (multimodal (identifier, offset) pairs, prompt-embedding
// bytes, later blocks) is only checked for well-formedness.
func (dec *Decoder) extraKeys() error {
	n, err := dec.optArrayLen("an array")
	if err != nil || n < 0 {
		return err
	}
	for b := 0; b < n; b++ {
		if b > 0 {
			if err := dec.skip(); err != nil {
				return fmt.Errorf("block %d: %w", b, err)
			}
			continue
		}
		if err := dec.firstBlockKeys(); err != nil {
			return fmt.Errorf("block 0: %w", err)
		}
	}
	return nil
}

// maxExtraStrings bounds the bare strings kept from one block's keys.
const maxExtraStrings = 16

// optArrayLen reads nil (n = -1) or an array header; what names the array
// in the error.
func (dec *Decoder) optArrayLen(what string) (int, error) {
	if null, err := dec.isNil(); err != nil || null {
		return -1, err
	}
	c, err := dec.peek()
	if err != nil {
		return 0, err
	}
	if !isArray(c) {
		return 0, fmt.Errorf("want %s, got %s", what, typeName(c))
	}
	return dec.containerLen(c, 1)
}

func (dec *Decoder) firstBlockKeys() error {
	n, err := dec.optArrayLen("an array of keys")
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		c, err := dec.peek()
		if err != nil {
			return err
		}
		switch {
		case isStr(c) && len(dec.es.extraStrings) < maxExtraStrings:
			s, err := dec.optString()
			if err != nil {
				return fmt.Errorf("key %d: %w", i, err)
			}
			dec.es.extraStrings = append(dec.es.extraStrings, s)
		case isMap(c):
			if err := dec.typedExtraKey(); err != nil {
				return fmt.Errorf("key %d: %w", i, err)
			}
		default:
			if err := dec.skip(); err != nil {
				return fmt.Errorf("key %d: %w", i, err)
			}
		}
	}
	return nil
}

// typedExtraKey reads one tagged ExtraKey map; only {"type": "cache_salt",
// "salt": S} matters here.
func (dec *Decoder) typedExtraKey() error {
	c, _ := dec.peek()
	n, err := dec.containerLen(c, 2)
	if err != nil {
		return err
	}
	var typ, salt string
	for i := 0; i < n; i++ {
		c, err := dec.peek()
		if err != nil {
			return err
		}
		if !isStr(c) {
			if err := dec.skip(); err != nil {
				return err
			}
			if err := dec.skip(); err != nil {
				return err
			}
			continue
		}
		k, err := dec.optString()
		if err != nil {
			return err
		}
		vc, err := dec.peek()
		if err != nil {
			return err
		}
		if (k == "type" || k == "salt") && isStr(vc) {
			v, err := dec.optString()
			if err != nil {
				return err
			}
			if k == "type" {
				typ = v
			} else {
				salt = v
			}
			continue
		}
		if err := dec.skip(); err != nil {
			return err
		}
	}
	if typ == "cache_salt" && salt != "" {
		dec.es.typedSalt = salt
	}
	return nil
}
