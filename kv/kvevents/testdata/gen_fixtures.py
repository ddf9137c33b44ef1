#!/usr/bin/python3
"""Generate KV-event fixtures the way vLLM and SGLang put them on the wire.

vLLM encodes its events with msgspec (`msgspec.Struct, omit_defaults=True,
tag=True`, plus `array_like=True` in every release before the map form).
msgspec is not installable here, so this script re-implements the two rules
that shape the bytes, from msgspec's documentation:

  * tag=True: the tag is the class name. array_like structs put it first in
    the array; map structs put it under the key "type", first.
  * omit_defaults=True: a field whose value equals its default is left out.
    In array_like structs only a trailing run of such fields can be left
    out (positions must stay fixed); in maps each one is.

Field lists and defaults are copied from vllm-project/vllm
vllm/distributed/kv_events.py (EventBatch, BlockStored, BlockRemoved,
AllBlocksCleared) for the current schema, and from the same file's history
(and SGLang's positional events) for the older ones.

Every fixture is packed with python3-msgpack (Debian package), which, like
msgspec, writes each integer in its smallest format (non-negative ones as
unsigned), floats as float64 and str/bytes as str/bin.

Writes <name>.msgpack and expected.json (the decoded values kvgate must
produce). Run from anywhere:  /usr/bin/python3 kv/kvevents/testdata/gen_fixtures.py
"""

import json
import os

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIRED = object()  # a field with no default: always encoded

# vllm/distributed/kv_events.py (current): EventBatch is not tagged.
EVENT_BATCH = [("ts", REQUIRED), ("events", REQUIRED), ("data_parallel_rank", None)]
# vllm/distributed/kv_events.py (current). lora_id, medium and lora_name are
# Optional but have no default, so msgspec always encodes them.
BLOCK_STORED = [
    ("block_hashes", REQUIRED),
    ("parent_block_hash", REQUIRED),
    ("token_ids", REQUIRED),
    ("block_size", REQUIRED),
    ("lora_id", REQUIRED),
    ("medium", REQUIRED),
    ("lora_name", REQUIRED),
    ("extra_keys", None),
    ("group_idx", None),
    ("kv_cache_spec_kind", None),
    ("kv_cache_spec_sliding_window", None),
]
BLOCK_REMOVED = [("block_hashes", REQUIRED), ("medium", REQUIRED), ("group_idx", None)]
ALL_BLOCKS_CLEARED = []

# vLLM main after the offload/locality work (vllm/distributed/kv_events.py:
# locality and ownership appended to both structs, "LOCAL or REMOTE relative
# to the publisher; None means unspecified"); events are maps only there.
BLOCK_STORED_LOCALITY = BLOCK_STORED + [("locality", None), ("ownership", None)]
BLOCK_REMOVED_LOCALITY = BLOCK_REMOVED + [("locality", None), ("ownership", None)]

# SGLang >= 0.5.18 (sgl-project/sglang#30827): the vLLM-compatible
# positional prefix, then a BlockStoredMetadata map in position 7 when the
# stored node carries a cache_salt (read by Dynamo's
# BlockStoredPositionSeven, lib/kv-router/src/zmq_wire/filter.rs).
BLOCK_STORED_SGLANG_META = BLOCK_STORED[:6] + [("metadata", REQUIRED)]
# SGLang after #37482: tagged maps, medium and cache_salt/session_id
# optional (default None), no lora_name.
BLOCK_STORED_SGLANG_MAP = BLOCK_STORED[:5] + [("medium", None), ("cache_salt", None), ("session_id", None)]
BLOCK_REMOVED_SGLANG_MAP = [("block_hashes", REQUIRED), ("medium", None)]

# Older vLLM (e.g. examples/online_serving/kv_events_subscriber.py of v0.9):
# no data_parallel_rank, BlockStored ends at medium.
EVENT_BATCH_V09 = [("ts", REQUIRED), ("events", REQUIRED)]
BLOCK_STORED_V09 = BLOCK_STORED[:6]
BLOCK_REMOVED_V09 = BLOCK_REMOVED[:2]
# Older SGLang / first vLLM release: BlockStored ends at lora_id,
# BlockRemoved carries only the hashes.
BLOCK_STORED_SGLANG = BLOCK_STORED[:5]
BLOCK_REMOVED_SGLANG = BLOCK_REMOVED[:1]

SCHEMAS = {
    "current": {"BlockStored": BLOCK_STORED, "BlockRemoved": BLOCK_REMOVED,
                "AllBlocksCleared": ALL_BLOCKS_CLEARED, "batch": EVENT_BATCH},
    "v09": {"BlockStored": BLOCK_STORED_V09, "BlockRemoved": BLOCK_REMOVED_V09,
            "AllBlocksCleared": ALL_BLOCKS_CLEARED, "batch": EVENT_BATCH_V09},
    "sglang": {"BlockStored": BLOCK_STORED_SGLANG, "BlockRemoved": BLOCK_REMOVED_SGLANG,
               "AllBlocksCleared": ALL_BLOCKS_CLEARED, "batch": EVENT_BATCH},
    "locality": {"BlockStored": BLOCK_STORED_LOCALITY, "BlockRemoved": BLOCK_REMOVED_LOCALITY,
                 "AllBlocksCleared": ALL_BLOCKS_CLEARED, "batch": EVENT_BATCH},
    "sglang_meta": {"BlockStored": BLOCK_STORED_SGLANG_META, "BlockRemoved": BLOCK_REMOVED_SGLANG,
                    "AllBlocksCleared": ALL_BLOCKS_CLEARED, "batch": EVENT_BATCH},
    "sglang_map": {"BlockStored": BLOCK_STORED_SGLANG_MAP, "BlockRemoved": BLOCK_REMOVED_SGLANG_MAP,
                   "AllBlocksCleared": ALL_BLOCKS_CLEARED, "batch": EVENT_BATCH},
}


def struct_array(fields, values, tag=None):
    """msgspec array_like + omit_defaults (+ tag) layout."""
    out = [values[name] if name in values else default for name, default in fields]
    for name in values:
        if name not in dict(fields):
            raise ValueError("field %s not in schema" % name)
    while fields and len(out) > 0:
        name, default = fields[len(out) - 1]
        if default is REQUIRED or out[-1] != default:
            break
        out.pop()
    if any(v is REQUIRED for v in out):
        raise ValueError("required field missing")
    return ([tag] if tag is not None else []) + out


def struct_map(fields, values, tag=None):
    """msgspec omit_defaults (+ tag under "type") layout."""
    out = {}
    if tag is not None:
        out["type"] = tag
    for name, default in fields:
        v = values.get(name, default)
        if v is REQUIRED:
            raise ValueError("required field %s missing" % name)
        if default is not REQUIRED and v == default:
            continue
        out[name] = v
    return out


def hash_value(h):
    """What kvgate must decode a wire block hash to (see kvevents docs):
    int -> two's complement uint64; bytes -> last 8 bytes big-endian,
    left-padded with zeros when shorter."""
    if h is None:
        return None
    if isinstance(h, (bytes, str)):
        b = h.encode() if isinstance(h, str) else h
        return int.from_bytes(b[-8:], "big")
    return h & 0xFFFFFFFFFFFFFFFF


def expected_salt(v):
    """The cache namespace kvgate must read (kvevents Event.CacheSalt):
    SGLang's explicit cache_salt (named, or the position-7 metadata map),
    else vLLM's: the last bare string of the first block's extra_keys that
    is neither the first copy of the LoRA name nor a 64-hex multimodal
    digest, only on an event that starts a sequence
    (generate_block_hash_extra_keys puts the salt on token 0's block)."""
    if v.get("cache_salt"):
        return v["cache_salt"]
    meta = v.get("metadata")
    if isinstance(meta, dict) and meta.get("cache_salt"):
        return meta["cache_salt"]
    ek = v.get("extra_keys")
    if not ek or ek[0] is None or v.get("parent_block_hash") is not None:
        return ""
    for key in ek[0]:
        if isinstance(key, dict) and key.get("type") == "cache_salt" and key.get("salt"):
            return key["salt"]
    lora, skipped, salt = v.get("lora_name") or "", False, ""
    for key in ek[0]:
        if not isinstance(key, str):
            continue
        if lora and not skipped and key == lora:
            skipped = True
        elif len(key) == 64 and all(c in "0123456789abcdefABCDEF" for c in key):
            continue
        else:
            salt = key
    return salt


def expected_event(kind, v):
    e = {"kind": kind, "block_hashes": [], "parent": None, "token_ids": [],
         "block_size": 0, "lora_id": None, "lora_name": "", "medium": "", "group_idx": 0,
         "has_group_idx": False, "spec_kind": "", "cache_salt": "", "locality": ""}
    if kind == "AllBlocksCleared":
        e["block_hashes"] = []
        return e
    e["block_hashes"] = [hash_value(h) for h in v["block_hashes"]]
    e["medium"] = v.get("medium") or ""
    e["group_idx"] = v.get("group_idx") or 0
    e["has_group_idx"] = v.get("group_idx") is not None
    e["spec_kind"] = v.get("kv_cache_spec_kind") or ""
    e["locality"] = v.get("locality") or ""
    if kind == "BlockStored":
        e["parent"] = hash_value(v.get("parent_block_hash"))
        e["token_ids"] = list(v["token_ids"])
        e["block_size"] = v["block_size"]
        e["lora_id"] = v.get("lora_id")
        e["lora_name"] = v.get("lora_name") or ""
        e["cache_salt"] = expected_salt(v)
    return e


def build(schema_name, layout, ts, events, dp_rank=None, batch_extra=None, event_extra=None,
          type_last=False):
    """events: list of (kind, values). layout: "array" (msgspec array_like
    everywhere), "map" (vLLM v0.26: batch array, events maps) or
    "mapbatch" (vLLM main between #42892 and v0.26: batch and events maps).
    Returns (wire object, expected dict)."""
    schema = SCHEMAS[schema_name]
    wire_events = []
    for i, (kind, values) in enumerate(events):
        fields = schema[kind]
        if layout == "array":
            wire_events.append(struct_array(fields, values, tag=kind))
        else:
            m = struct_map(fields, values, tag=kind)
            if event_extra and i in event_extra:
                m.update(event_extra[i])
            if type_last:
                m.pop("type")
                m["type"] = kind
            wire_events.append(m)
    bvals = {"ts": ts, "events": wire_events}
    if dp_rank is not None:
        bvals["data_parallel_rank"] = dp_rank
    if layout in ("array", "map"):
        wire = struct_array(schema["batch"], bvals)
    else:
        wire = struct_map(schema["batch"], bvals)
        if batch_extra:
            wire.update(batch_extra)
    expected = {"ts": ts, "dp_rank": dp_rank,
                "events": [expected_event(k, v) for k, v in events]}
    return wire, expected


def tokens(start, n):
    return list(range(start, start + n))


BS = 16  # vLLM's default block size


def fixtures():
    out = []

    # vLLM with array_like=True and the current field list: trailing
    # defaults (extra_keys, group_idx, kv_cache_spec_*) truncated. Events
    # chain: blocks 1,2 (no parent), block 3 under 2, a LoRA block, a
    # removal, and an offload of blocks 1,2 to CPU.
    wire, exp = build("current", "array", 1733011200.25, [
        ("BlockStored", {"block_hashes": [101, 102], "parent_block_hash": None,
                         "token_ids": tokens(1000, 2 * BS), "block_size": BS,
                         "lora_id": None, "medium": "GPU", "lora_name": None}),
        ("BlockStored", {"block_hashes": [103], "parent_block_hash": 102,
                         "token_ids": tokens(1000 + 2 * BS, BS), "block_size": BS,
                         "lora_id": None, "medium": "GPU", "lora_name": None}),
        ("BlockStored", {"block_hashes": [201], "parent_block_hash": None,
                         "token_ids": tokens(5000, BS), "block_size": BS,
                         "lora_id": 1, "medium": "GPU", "lora_name": "adapter-a"}),
        ("BlockRemoved", {"block_hashes": [103], "medium": "GPU"}),
        ("BlockStored", {"block_hashes": [101, 102], "parent_block_hash": None,
                         "token_ids": tokens(1000, 2 * BS), "block_size": BS,
                         "lora_id": None, "medium": "CPU", "lora_name": None}),
    ], dp_rank=1)
    out.append(("array_current", wire, exp, "array"))

    # Current schema with the defaulted fields set: extra_keys (vLLM >= 0.19
    # multimodal keys are (identifier, offset) pairs; a nested value must
    # still be skipped), group_idx, kv_cache_spec_*.
    wire, exp = build("current", "array", 17.5, [
        ("BlockStored", {"block_hashes": [7, 8], "parent_block_hash": None,
                         "token_ids": tokens(0, 2 * BS), "block_size": BS,
                         "lora_id": None, "medium": "GPU", "lora_name": None,
                         "extra_keys": [[["mm-hash-abc", 3], {"nested": [1.5, None, True]}], None],
                         "group_idx": 1, "kv_cache_spec_kind": "sliding_window",
                         "kv_cache_spec_sliding_window": 4096}),
        ("BlockRemoved", {"block_hashes": [8], "medium": "GPU", "group_idx": 1}),
        ("AllBlocksCleared", {}),
    ], dp_rank=0)
    out.append(("array_group_extra_keys", wire, exp, None))

    # dp_rank absent (None is the default, so msgspec drops it), hashes as
    # negative int64, big uint64, 32-byte and 4-byte bytes (newer vLLM's
    # ExternalBlockHash may be bytes), nil parent, medium None.
    h_neg = -6917529027641081856
    h_big = 18446744073709551557
    h_sha = bytes(range(0x40, 0x60))
    h_short = b"\x01\x02\x03\x04"
    wire, exp = build("current", "array", 99.0, [
        ("BlockStored", {"block_hashes": [h_neg, h_big], "parent_block_hash": None,
                         "token_ids": tokens(300, 2 * BS), "block_size": BS,
                         "lora_id": None, "medium": None, "lora_name": None}),
        ("BlockStored", {"block_hashes": [h_sha], "parent_block_hash": h_big,
                         "token_ids": tokens(300 + 2 * BS, BS), "block_size": BS,
                         "lora_id": None, "medium": None, "lora_name": None}),
        ("BlockStored", {"block_hashes": [h_short], "parent_block_hash": h_sha,
                         "token_ids": [4294967295] * BS, "block_size": BS,
                         "lora_id": None, "medium": "GPU", "lora_name": None}),
        ("BlockRemoved", {"block_hashes": [h_neg, h_sha, h_short], "medium": None}),
    ])
    out.append(("array_hash_forms_no_dp_rank", wire, exp, None))

    # Newer vLLM: maps with "type", defaults omitted, every medium class.
    wire, exp = build("current", "map", 1733011300.5, [
        ("BlockStored", {"block_hashes": [11, 12], "parent_block_hash": None,
                         "token_ids": tokens(1, 2 * BS), "block_size": BS,
                         "lora_id": 3, "medium": "GPU", "lora_name": "sql-lora"}),
        ("BlockStored", {"block_hashes": [11], "parent_block_hash": None,
                         "token_ids": tokens(1, BS), "block_size": BS,
                         "lora_id": 3, "medium": "CPU_TIER2", "lora_name": "sql-lora"}),
        ("BlockStored", {"block_hashes": [13], "parent_block_hash": 12,
                         "token_ids": tokens(1 + 2 * BS, BS), "block_size": BS,
                         "lora_id": 3, "medium": "SHARED", "lora_name": "sql-lora"}),
        ("BlockRemoved", {"block_hashes": [11], "medium": "CPU_TIER2"}),
        ("AllBlocksCleared", {}),
    ], dp_rank=2)
    out.append(("map_current", wire, exp, "map"))

    # Map form with keys kvgate does not know (must be ignored), "type"
    # last, dp rank absent, group_idx set.
    wire, exp = build("current", "map", 5.0, [
        ("BlockStored", {"block_hashes": [21], "parent_block_hash": None,
                         "token_ids": tokens(77, BS), "block_size": BS,
                         "lora_id": None, "medium": "CPU_PINNED", "lora_name": None,
                         "group_idx": 2}),
        ("BlockRemoved", {"block_hashes": [21], "medium": "CPU_PINNED", "group_idx": 2}),
    ], batch_extra={"producer": {"name": "vllm", "version": [0, 12, 1]}, "z": None},
        event_extra={0: {"future_field": [1, 2, {"k": b"\x00\xff"}], "score": 0.5},
                     1: {"x_ext": msgpack.ExtType(5, b"abc")}},
        type_last=True)
    wire, exp = build("current", "mapbatch", 5.0, [
        ("BlockStored", {"block_hashes": [21], "parent_block_hash": None,
                         "token_ids": tokens(77, BS), "block_size": BS,
                         "lora_id": None, "medium": "CPU_PINNED", "lora_name": None,
                         "group_idx": 2}),
        ("BlockRemoved", {"block_hashes": [21], "medium": "CPU_PINNED", "group_idx": 2}),
    ], batch_extra={"producer": {"name": "vllm", "version": [0, 12, 1]}, "z": None},
        event_extra={0: {"future_field": [1, 2, {"k": b"\x00\xff"}], "score": 0.5},
                     1: {"x_ext": msgpack.ExtType(5, b"abc")}},
        type_last=True)
    out.append(("mapbatch_unknown_keys", wire, exp, None))

    # vLLM v0.26 as its engines send it: the batch an array, events maps
    # with group_idx 0 and kv_cache_spec_kind written, extra_keys [None]
    # (shape of the v0.26.0 dump in volcano-sh/kthena#1535), then a
    # OffloadingConnector placeholder pair in the same batch (vllm#43468:
    # self_describing_kv_events false -> token_ids [], block_size 0,
    # medium CPU / STORAGE), then a GPU removal.
    wire, exp = build("current", "map", 1789095808.8378847, [
        ("BlockStored", {"block_hashes": [15760518052499183552], "parent_block_hash": None,
                         "token_ids": tokens(151644, BS), "block_size": BS,
                         "lora_id": None, "medium": "GPU", "lora_name": None,
                         "extra_keys": [None], "group_idx": 0,
                         "kv_cache_spec_kind": "full_attention"}),
        ("BlockStored", {"block_hashes": [15760518052499183552], "parent_block_hash": None,
                         "token_ids": [], "block_size": 0,
                         "lora_id": None, "medium": "CPU", "lora_name": None}),
        ("BlockStored", {"block_hashes": [15760518052499183552], "parent_block_hash": None,
                         "token_ids": [], "block_size": 0,
                         "lora_id": None, "medium": "STORAGE", "lora_name": None}),
        ("BlockRemoved", {"block_hashes": [15760518052499183552], "medium": "GPU", "group_idx": 0}),
    ], dp_rank=0)
    out.append(("map_v026_offload_placeholders", wire, exp, None))
    wire, exp = build("current", "array", 1789095808.5, [
        ("BlockStored", {"block_hashes": [51], "parent_block_hash": None,
                         "token_ids": tokens(10, BS), "block_size": BS,
                         "lora_id": None, "medium": "GPU", "lora_name": None}),
        ("BlockStored", {"block_hashes": [51], "parent_block_hash": None,
                         "token_ids": [], "block_size": 0,
                         "lora_id": None, "medium": "CPU", "lora_name": None}),
    ], dp_rank=0)
    out.append(("array_offload_placeholder", wire, exp, "array"))

    # Hybrid model (vLLM PR #37688): every KV-cache group publishes the
    # same engine hashes; kv_cache_spec_kind tells the groups apart
    # (vLLM PR #40984). Group 1's removal must not touch group 0.
    for layout in ("map", "array"):
        wire, exp = build("current", layout, 300.0, [
            ("BlockStored", {"block_hashes": [61, 62], "parent_block_hash": None,
                             "token_ids": tokens(500, 2 * BS), "block_size": BS,
                             "lora_id": None, "medium": "GPU", "lora_name": None,
                             "group_idx": 0, "kv_cache_spec_kind": "full_attention"}),
            ("BlockStored", {"block_hashes": [61, 62], "parent_block_hash": None,
                             "token_ids": tokens(500, 2 * BS), "block_size": BS,
                             "lora_id": None, "medium": "GPU", "lora_name": None,
                             "group_idx": 1, "kv_cache_spec_kind": "sliding_window",
                             "kv_cache_spec_sliding_window": 128}),
            ("BlockRemoved", {"block_hashes": [61], "medium": "GPU", "group_idx": 1}),
        ], dp_rank=0)
        out.append((layout + "_hybrid_groups", wire, exp, None))

    # Salted vLLM requests: generate_block_hash_extra_keys puts
    # lora_name, multimodal keys, then cache_salt on the first block only;
    # a continuation carries no salt. The typed ExtraKey form
    # ({"type": "cache_salt", "salt": ...}) names it outright.
    for layout in ("map", "array"):
        wire, exp = build("current", layout, 400.0, [
            ("BlockStored", {"block_hashes": [71, 72], "parent_block_hash": None,
                             "token_ids": tokens(900, 2 * BS), "block_size": BS,
                             "lora_id": None, "medium": "GPU", "lora_name": None,
                             "extra_keys": [["tenant-a"], None]}),
            ("BlockStored", {"block_hashes": [73], "parent_block_hash": 72,
                             "token_ids": tokens(900 + 2 * BS, BS), "block_size": BS,
                             "lora_id": None, "medium": "GPU", "lora_name": None,
                             "extra_keys": [None]}),
            ("BlockStored", {"block_hashes": [74], "parent_block_hash": None,
                             "token_ids": tokens(900, BS), "block_size": BS,
                             "lora_id": 2, "medium": "GPU", "lora_name": "sql-lora",
                             "extra_keys": [["sql-lora", ["0" * 64, 5], "a" * 64, "tenant-b"]]}),
            ("BlockStored", {"block_hashes": [75], "parent_block_hash": None,
                             "token_ids": tokens(900, BS), "block_size": BS,
                             "lora_id": None, "medium": "GPU", "lora_name": None,
                             "extra_keys": [[{"type": "cache_salt", "salt": "tenant-c"}]]}),
        ], dp_rank=0)
        out.append((layout + "_salted_extra_keys", wire, exp, None))

    # SGLang >= 0.5.18 positional with the metadata map in position 7, an
    # unsalted event beside it, in one batch (Dynamo PR #14530: a decoder
    # reading position 7 as a string dropped the whole batch).
    wire, exp = build("sglang_meta", "array", 500.0, [
        ("BlockStored", {"block_hashes": [81], "parent_block_hash": None,
                         "token_ids": tokens(40, 1), "block_size": 1, "lora_id": None,
                         "medium": "GPU", "metadata": {"cache_salt": "tenant-s", "session_id": "sess-1"}}),
    ], dp_rank=0)
    plain, plain_exp = build("sglang", "array", 500.0, [
        ("BlockStored", {"block_hashes": [82], "parent_block_hash": 81,
                         "token_ids": tokens(41, 1), "block_size": 1, "lora_id": None}),
    ])
    wire[1].extend(plain[1])
    exp["events"].extend(plain_exp["events"])
    out.append(("array_sglang_salt_metadata", wire, exp, None))
    # SGLang after #37482: tagged maps, cache_salt and session_id named.
    wire, exp = build("sglang_map", "map", 501.0, [
        ("BlockStored", {"block_hashes": [83], "parent_block_hash": None,
                         "token_ids": tokens(40, 1), "block_size": 1, "lora_id": None,
                         "medium": "GPU", "cache_salt": "tenant-s", "session_id": "sess-1"}),
        ("BlockStored", {"block_hashes": [84], "parent_block_hash": 83,
                         "token_ids": tokens(41, 1), "block_size": 1, "lora_id": None,
                         "cache_salt": "tenant-s"}),
        ("BlockRemoved", {"block_hashes": [84]}),
    ], dp_rank=0)
    out.append(("map_sglang_cache_salt", wire, exp, None))

    # vLLM locality (REMOTE blocks belong to no local worker: Dynamo's
    # convert_event drops them).
    wire, exp = build("locality", "map", 600.0, [
        ("BlockStored", {"block_hashes": [91], "parent_block_hash": None,
                         "token_ids": tokens(1, BS), "block_size": BS, "lora_id": None,
                         "medium": "CPU", "lora_name": None, "locality": "REMOTE",
                         "ownership": "p2p-tier"}),
        ("BlockStored", {"block_hashes": [92], "parent_block_hash": None,
                         "token_ids": tokens(1, BS), "block_size": BS, "lora_id": None,
                         "medium": "CPU", "lora_name": None, "locality": "LOCAL"}),
        ("BlockRemoved", {"block_hashes": [91], "medium": "CPU", "locality": "REMOTE"}),
    ], dp_rank=0)
    out.append(("map_locality", wire, exp, None))

    # llm-d-inference-sim (before llm-d/llm-d-inference-sim#570) wrote
    # parent_block_hash 0 for "no parent" in the array encoding.
    wire, exp = build("current", "array", 700.0, [
        ("BlockStored", {"block_hashes": [101], "parent_block_hash": 0,
                         "token_ids": tokens(3, BS), "block_size": BS,
                         "lora_id": None, "medium": "GPU", "lora_name": None}),
    ])
    out.append(("array_parent_zero", wire, exp, "array"))

    # Published from a real engine: the batch a vLLM v0.26.0 server
    # (Qwen3-8B, --kv-events-config topic "kv-events") sent, as printed in
    # volcano-sh/kthena#1535 (comment of 2026-09-11): every value below is
    # copied from that dump, re-encoded the way v0.26's msgspec encoder
    # writes it (the batch an array, the event a map, omit_defaults).
    wire, exp = build("current", "map", 1789095808.8378847, [
        ("BlockStored", {"block_hashes": [15760518052499183552], "parent_block_hash": None,
                         "token_ids": [151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30,
                                       151645, 198, 151644, 77091, 198, 151667],
                         "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
                         "extra_keys": [None], "group_idx": 0,
                         "kv_cache_spec_kind": "full_attention"}),
    ], dp_rank=0)
    out.append(("upstream_vllm_v0260_kthena1535", wire, exp, None))

    # vLLM ~v0.9: array batch without dp rank, BlockStored ending at medium.
    wire, exp = build("v09", "array", 42.125, [
        ("BlockStored", {"block_hashes": [31, 32], "parent_block_hash": None,
                         "token_ids": tokens(9000, 2 * BS), "block_size": BS,
                         "lora_id": None, "medium": "GPU"}),
        ("BlockRemoved", {"block_hashes": [32], "medium": "GPU"}),
        ("AllBlocksCleared", {}),
    ])
    out.append(("array_vllm_v09", wire, exp, None))

    # Older SGLang: positional events ending at lora_id, removals carry
    # only hashes; attention-DP rank present.
    wire, exp = build("sglang", "array", 1.0e9, [
        ("BlockStored", {"block_hashes": [41], "parent_block_hash": None,
                         "token_ids": tokens(12, BS), "block_size": BS, "lora_id": None}),
        ("BlockStored", {"block_hashes": [42], "parent_block_hash": 41,
                         "token_ids": tokens(12 + BS, BS), "block_size": BS, "lora_id": None}),
        ("BlockRemoved", {"block_hashes": [41, 42]}),
    ], dp_rank=3)
    out.append(("array_sglang_positional", wire, exp, None))
    return out


def main():
    index = []
    for name, wire, expected, canonical in fixtures():
        path = name + ".msgpack"
        with open(os.path.join(HERE, path), "wb") as f:
            f.write(msgpack.packb(wire, use_bin_type=True))
        index.append({"name": name, "file": path, "canonical": canonical, "batch": expected})
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump({"generator": "gen_fixtures.py", "fixtures": index}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
