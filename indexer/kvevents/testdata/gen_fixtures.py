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
produce). Run from anywhere:  /usr/bin/python3 indexer/kvevents/testdata/gen_fixtures.py
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


def expected_event(kind, v):
    e = {"kind": kind, "block_hashes": [], "parent": None, "token_ids": [],
         "block_size": 0, "lora_id": None, "lora_name": "", "medium": "", "group_idx": 0}
    if kind == "AllBlocksCleared":
        e["block_hashes"] = []
        return e
    e["block_hashes"] = [hash_value(h) for h in v["block_hashes"]]
    e["medium"] = v.get("medium") or ""
    e["group_idx"] = v.get("group_idx") or 0
    if kind == "BlockStored":
        e["parent"] = hash_value(v.get("parent_block_hash"))
        e["token_ids"] = list(v["token_ids"])
        e["block_size"] = v["block_size"]
        e["lora_id"] = v.get("lora_id")
        e["lora_name"] = v.get("lora_name") or ""
    return e


def build(schema_name, layout, ts, events, dp_rank=None, batch_extra=None, event_extra=None,
          type_last=False):
    """events: list of (kind, values). Returns (wire object, expected dict)."""
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
    if layout == "array":
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

    # Current schema with the defaulted fields set: extra_keys (opaque,
    # must be skipped), group_idx, kv_cache_spec_*.
    wire, exp = build("current", "array", 17.5, [
        ("BlockStored", {"block_hashes": [7, 8], "parent_block_hash": None,
                         "token_ids": tokens(0, 2 * BS), "block_size": BS,
                         "lora_id": None, "medium": "GPU", "lora_name": None,
                         "extra_keys": [["mm-hash-abc", 3, {"nested": [1.5, None, True]}], None],
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
    out.append(("map_unknown_keys", wire, exp, None))

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
