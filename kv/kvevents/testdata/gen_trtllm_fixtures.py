#!/usr/bin/python3
"""Generate TensorRT-LLM KV-event fixtures the way the engine serializes them.

TensorRT-LLM hands its KV cache events out as a list of dicts built by
tensorrt_llm/_utils.py KVCacheEventSerializer (NVIDIA/TensorRT-LLM commit
ed53795b33fc139493f762a1c6c53f691cf52d38):

  event  = {"event_id", "data", "window_size"} + "attention_dp_rank" when set
  data   = created:  {"type": "created", "num_blocks_per_cache_level"}
           stored:   {"type": "stored", "parent_hash", "blocks"}
           block:    {"type": "stored_block", "block_hash", "tokens",
                      "cache_level", "priority"}   (lora_id is not serialized)
           token:    {"type": "unique_token", "token_id", "token_extra_id"}
           removed:  {"type": "removed", "block_hashes"}
           updated:  {"type": "updated", "block_hash", "cache_level",
                      "priority"}, each diff {"type": "event_diff",
                      "new_value", "old_value"}

The functions below build exactly those dicts (keys in the serializer's
order). One payload is the list msgpack-encoded. python3-msgpack is not
installed here, so `pack` writes msgpack itself by the spec
(github.com/msgpack/msgpack/blob/master/spec.md), choosing each integer's
smallest format as msgpack-python does (non-negative ones unsigned).

Writes trtllm_<name>.msgpack and trtllm_expected.json (what kvgate's
decoder must produce). Run: /usr/bin/python3 kv/kvevents/testdata/gen_trtllm_fixtures.py
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def pack(v):
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 0x80:
            return bytes([v])
        if 0 <= v <= 0xFF:
            return b"\xcc" + struct.pack(">B", v)
        if 0 <= v <= 0xFFFF:
            return b"\xcd" + struct.pack(">H", v)
        if 0 <= v <= 0xFFFFFFFF:
            return b"\xce" + struct.pack(">I", v)
        if 0 <= v <= 0xFFFFFFFFFFFFFFFF:
            return b"\xcf" + struct.pack(">Q", v)
        if -32 <= v < 0:
            return struct.pack(">b", v)
        if -0x80 <= v < 0:
            return b"\xd0" + struct.pack(">b", v)
        if -0x8000 <= v < 0:
            return b"\xd1" + struct.pack(">h", v)
        if -0x80000000 <= v < 0:
            return b"\xd2" + struct.pack(">i", v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        if len(b) <= 0xFF:
            return b"\xd9" + struct.pack(">B", len(b)) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, list):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(type(v))


def event(event_id, data, window_size=32, attention_dp_rank=None):
    e = {"event_id": event_id, "data": data, "window_size": window_size}
    if attention_dp_rank is not None:
        e["attention_dp_rank"] = attention_dp_rank
    return e


def created(levels):
    return {"type": "created", "num_blocks_per_cache_level": levels}


def token(t, extra=0):
    return {"type": "unique_token", "token_id": t, "token_extra_id": extra}


def block(h, tokens, cache_level=0, priority=35):
    return {"type": "stored_block", "block_hash": h, "tokens": [token(t) if isinstance(t, int) else t for t in tokens],
            "cache_level": cache_level, "priority": priority}


def stored(parent, blocks):
    return {"type": "stored", "parent_hash": parent, "blocks": blocks}


def removed(hashes):
    return {"type": "removed", "block_hashes": hashes}


def diff(new, old):
    return {"type": "event_diff", "new_value": new, "old_value": old}


def updated(h):
    return {"type": "updated", "block_hash": h, "cache_level": diff(1, 0), "priority": diff(35, 35)}


BIG = 0xF000000000000001  # a size_t hash above 2^63

FIXTURES = [
    ("chain", [
        event(0, created([1024, 0])),
        event(1, stored(None, [block(11, [1, 2, 3, 4]), block(12, [5, 6, 7, 8]), block(13, [9, 10])])),
        event(2, stored(12, [block(14, [9, 10, 11, 12], cache_level=1)])),
        event(3, removed([11, 12])),
    ], [
        {"kind": "AllBlocksCleared"},
        {"kind": "BlockStored", "block_hashes": [11, 12], "parent": None, "token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "block_size": 4, "medium": ""},
        {"kind": "BlockStored", "block_hashes": [14], "parent": 12, "token_ids": [9, 10, 11, 12], "block_size": 4, "medium": "CPU"},
        {"kind": "BlockRemoved", "block_hashes": [11, 12]},
    ], None),
    ("attention_dp", [
        event(7, stored(BIG, [block(BIG + 1, [100, 200])]), attention_dp_rank=1),
        event(8, removed([BIG + 1]), attention_dp_rank=1),
    ], [
        {"kind": "BlockStored", "block_hashes": [BIG + 1], "parent": BIG, "token_ids": [100, 200], "block_size": 2, "medium": ""},
        {"kind": "BlockRemoved", "block_hashes": [BIG + 1]},
    ], 1),
    ("unusable", [
        event(20, updated(11)),
        event(21, stored(None, [block(30, [token(1, extra=77), token(2)])])),
        event(22, removed([30])),
    ], [
        {"kind": "", "err": True},
        {"kind": "BlockStored", "err": True},
        {"kind": "BlockRemoved", "block_hashes": [30]},
    ], None),
]


def main():
    out = []
    for name, events, want, dp_rank in FIXTURES:
        fname = "trtllm_%s.msgpack" % name
        with open(os.path.join(HERE, fname), "wb") as f:
            f.write(pack(events))
        out.append({"name": name, "file": fname, "dp_rank": dp_rank, "events": want})
    with open(os.path.join(HERE, "trtllm_expected.json"), "w") as f:
        json.dump({"fixtures": out}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
