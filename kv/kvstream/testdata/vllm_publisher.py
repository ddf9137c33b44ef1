#!/usr/bin/python3
"""A minimal KV-event publisher written the way vLLM's ZmqEventPublisher
(vllm/distributed/kv_events.py) is: a pyzmq PUB sending
[topic, seq.to_bytes(8, "big"), payload] with seq counting from 0, and a
ROUTER answering replay requests [identity, b"", start] from a bounded
deque. Replies follow --replay-layout:
  v0.26  (vLLM >= v0.26, vllm-project/vllm#45177, _service_replay):
         [identity, b"", topic, seq, payload] ..., then the end marker
         [identity, b"", b"", END_SEQ, b""];
  legacy (vLLM < v0.26, SGLang's kv_events.py):
         [identity, b"", seq, payload] ..., then [identity, b"", END_SEQ, b""];
with END_SEQ = (-1).to_bytes(8, "big", signed=True).

Driven by the Go interop test over stdin, one command per line:
  live <payload>   publish, sending live and buffering for replay
  skip <payload>   buffer for replay only (a batch the subscriber misses)
  hex <hex>        publish live the bytes <hex> encodes (a msgpack batch)
  quit
It prints the bound endpoints as one JSON line, then "seq <n>" per publish.
"""

import argparse
import json
import queue
import sys
import threading
from collections import deque
from itertools import count

import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topic", default="")
    ap.add_argument("--buffer-steps", type=int, default=10_000)
    ap.add_argument("--hwm", type=int, default=100_000)
    ap.add_argument("--replay-layout", choices=("v0.26", "legacy"), default="v0.26")
    # vLLM connects its PUB instead of binding when the endpoint has no
    # wildcard (ZmqEventPublisher._socket_setup): a central subscriber.
    ap.add_argument("--connect", default="")
    args = ap.parse_args()

    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.set_hwm(args.hwm)
    if args.connect:
        pub.connect(args.connect)
        pub_port = 0
    else:
        pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
    replay = ctx.socket(zmq.ROUTER)
    replay_port = replay.bind_to_random_port("tcp://127.0.0.1")

    print(json.dumps({
        "pub": f"tcp://127.0.0.1:{pub_port}",
        "replay": f"tcp://127.0.0.1:{replay_port}",
        "zmq": zmq.zmq_version(),
        "pyzmq": zmq.__version__,
    }), flush=True)

    commands = queue.Queue()

    def read_stdin():
        for line in sys.stdin:
            commands.put(line.rstrip("\n"))
        commands.put("quit")

    threading.Thread(target=read_stdin, daemon=True).start()

    buffer = deque(maxlen=args.buffer_steps)
    seq_gen = count()
    topic = args.topic.encode("utf-8")

    # The loop of ZmqEventPublisher._publisher_thread: replay first
    # (non-critical), then the main queue with a 0.1 s wait.
    while True:
        if replay.poll(0):
            frame = replay.recv_multipart()
            if len(frame) != 3:
                print(f"invalid replay request: {frame}", file=sys.stderr, flush=True)
            else:
                client_id, _, start_seq_bytes = frame
                start_seq = int.from_bytes(start_seq_bytes, "big")
                for seq, buf in buffer:
                    if seq >= start_seq:
                        if args.replay_layout == "v0.26":
                            replay.send_multipart((client_id, b"", topic, seq.to_bytes(8, "big"), buf))
                        else:
                            replay.send_multipart((client_id, b"", seq.to_bytes(8, "big"), buf))
                if args.replay_layout == "v0.26":
                    replay.send_multipart((client_id, b"", b"", END_SEQ, b""))
                else:
                    replay.send_multipart((client_id, b"", END_SEQ, b""))
        try:
            cmd = commands.get(timeout=0.1)
        except queue.Empty:
            continue
        if cmd == "quit":
            break
        kind, _, payload = cmd.partition(" ")
        seq = next(seq_gen)
        payload = bytes.fromhex(payload) if kind == "hex" else payload.encode("utf-8")
        if kind in ("live", "hex"):
            pub.send_multipart((topic, seq.to_bytes(8, "big"), payload))
        elif kind != "skip":
            print(f"unknown command {cmd!r}", file=sys.stderr, flush=True)
            sys.exit(2)
        buffer.append((seq, payload))
        print(f"seq {seq}", flush=True)

    pub.close(linger=0)
    replay.close(linger=0)


if __name__ == "__main__":
    main()
