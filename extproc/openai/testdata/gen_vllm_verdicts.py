#!/usr/bin/python3
"""Generate vllm_verdicts.tsv: request bodies and what vLLM makes of them.

Each body is read the way vLLM's OpenAI server reads it:

  * FastAPI's request handler (fastapi/routing.py get_request_handler) calls
    Starlette's Request.json (starlette/requests.py), which is
    json.loads(body) on the raw bytes. CPython's json.loads picks the bytes'
    encoding with detect_encoding (Lib/json/__init__.py): a UTF-8 BOM makes
    it "utf-8-sig". NaN, Infinity and -Infinity are accepted.
  * FastAPI validates the resulting Python objects with pydantic v2 in lax
    mode (Python input) against vLLM's request model.

The models below transcribe the field types of the fields kvgate reads from
vllm-project/vllm at commit d5dba2d7b0ab9b98096560c69db7126b54b14d79:
vllm/entrypoints/openai/chat_completion/protocol.py ChatCompletionRequest and
vllm/entrypoints/openai/completion/protocol.py CompletionRequest, both on
OpenAIBaseModel (engine/protocol.py: extra="allow"), with their
mode="before" validators check_generation_prompt and
check_cache_salt_support. `messages` is list[dict] here: the rows keep it
valid, message shapes are not what this table is about.

Two refusals come after the model and are applied as vLLM applies them:
SamplingParams refuses a max_tokens below 1 (vllm/sampling_params.py
_verify_args), and transformers' apply_chat_template refuses
continue_final_message together with add_generation_prompt (the default,
True). kvgate refuses negative bounds; 0 it leaves to the engine (the
completions endpoint serves max_tokens 0 with echo), so 0 is not tabled.

Run with a pydantic v2 (the table was written with pydantic 2.13.4,
pydantic-core 2.46.4):  python3 extproc/openai/testdata/gen_vllm_verdicts.py
"""

import json
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator


class Base(BaseModel):
    model_config = ConfigDict(extra="allow")


def check_cache_salt(data):
    if isinstance(data, dict) and data.get("cache_salt") is not None and (
        not isinstance(data["cache_salt"], str) or not data["cache_salt"]
    ):
        raise ValueError("Parameter 'cache_salt' must be a non-empty string if provided.")
    return data


class Chat(Base):
    messages: list[dict[str, Any]]
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool | None = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    cache_salt: str | None = None

    @model_validator(mode="before")
    @classmethod
    def check_generation_prompt(cls, data):
        if isinstance(data, dict) and data.get("continue_final_message") and data.get("add_generation_prompt"):
            raise ValueError("Cannot set both")
        return data

    @model_validator(mode="before")
    @classmethod
    def check_cache_salt_support(cls, data):
        return check_cache_salt(data)


class Completion(Base):
    model: str | None = None
    prompt: list[int] | list[list[int]] | str | list[str] | None = None
    max_tokens: int | None = 16
    stream: bool | None = False
    cache_salt: str | None = None

    @model_validator(mode="before")
    @classmethod
    def check_cache_salt_support(cls, data):
        return check_cache_salt(data)


MSG = '"messages":[{"role":"user","content":"hi"}]'

# (endpoint, body fragment after the fixed part). Chat bodies get MSG and a
# model, completion bodies a model; the fragment is the rest of the object.
ROWS = [
    # max_tokens: int | None (lax int)
    ("chat", '"max_tokens":2'),
    ("chat", '"max_tokens":2.0'),
    ("chat", '"max_tokens":2e0'),
    ("chat", '"max_tokens":-0.0'),
    ("chat", '"max_tokens":2.5'),
    ("chat", '"max_tokens":"2"'),
    ("chat", '"max_tokens":" 2 "'),
    ("chat", '"max_tokens":"+2"'),
    ("chat", '"max_tokens":"002"'),
    ("chat", '"max_tokens":"2.0"'),
    ("chat", '"max_tokens":"2.000"'),
    ("chat", '"max_tokens":"2."'),
    ("chat", '"max_tokens":"2.5"'),
    ("chat", '"max_tokens":"2e0"'),
    ("chat", '"max_tokens":"1_000"'),
    ("chat", '"max_tokens":"1__000"'),
    ("chat", '"max_tokens":"_1"'),
    ("chat", '"max_tokens":"0x10"'),
    ("chat", '"max_tokens":""'),
    ("chat", '"max_tokens":"two"'),
    ("chat", '"max_tokens":"\\u00a02"'),
    ("chat", '"max_tokens":true'),
    ("chat", '"max_tokens":false'),
    ("chat", '"max_tokens":null'),
    ("chat", '"max_tokens":[2]'),
    ("chat", '"max_tokens":{"n":2}'),
    ("chat", '"max_tokens":NaN'),
    ("chat", '"max_tokens":Infinity'),
    ("chat", '"max_tokens":1e400'),
    ("chat", '"max_tokens":-1'),
    ("chat", '"max_tokens":"-1"'),
    ("chat", '"max_completion_tokens":"7","max_tokens":3'),
    ("chat", '"max_completion_tokens":7.0'),
    ("chat", '"max_completion_tokens":7.1'),
    # stream: bool | None (lax bool)
    ("chat", '"stream":true'),
    ("chat", '"stream":1'),
    ("chat", '"stream":0'),
    ("chat", '"stream":2'),
    ("chat", '"stream":1.0'),
    ("chat", '"stream":0.0'),
    ("chat", '"stream":0.5'),
    ("chat", '"stream":"true"'),
    ("chat", '"stream":"True"'),
    ("chat", '"stream":"TRUE"'),
    ("chat", '"stream":"yes"'),
    ("chat", '"stream":"on"'),
    ("chat", '"stream":"y"'),
    ("chat", '"stream":"t"'),
    ("chat", '"stream":"1"'),
    ("chat", '"stream":"0"'),
    ("chat", '"stream":"off"'),
    ("chat", '"stream":"No"'),
    ("chat", '"stream":" true"'),
    ("chat", '"stream":"2"'),
    ("chat", '"stream":"enabled"'),
    ("chat", '"stream":""'),
    ("chat", '"stream":null'),
    ("chat", '"stream":[]'),
    ("chat", '"stream":NaN'),
    # add_generation_prompt / continue_final_message: bool, not nullable
    ("chat", '"add_generation_prompt":null'),
    ("chat", '"add_generation_prompt":"false","continue_final_message":"yes"'),
    ("chat", '"add_generation_prompt":0,"continue_final_message":1'),
    ("chat", '"add_generation_prompt":"no","continue_final_message":"yes"'),
    ("chat", '"continue_final_message":null'),
    ("chat", '"continue_final_message":true'),
    # documents: list[dict[str, str]] | None
    ("chat", '"documents":[{"title":"a","text":"b"}]'),
    ("chat", '"documents":[{"title":1}]'),
    ("chat", '"documents":null'),
    # strings are never made from numbers in lax mode
    ("chat", '"model":5'),
    ("chat", '"chat_template":5'),
    ("chat", '"cache_salt":5'),
    ("chat", '"cache_salt":""'),
    ("chat", '"cache_salt":"s"'),
    # JSON the engine's json.loads accepts in fields kvgate only skips
    ("chat", '"temperature":NaN'),
    ("chat", '"temperature":-Infinity'),
    ("chat", '"temperature":nan'),
    # completions: prompt union, max_tokens, stream
    ("completion", '"prompt":"hi"'),
    ("completion", '"prompt":["a","b"]'),
    ("completion", '"prompt":["1","2"]'),
    ("completion", '"prompt":[1,2]'),
    ("completion", '"prompt":[1,"2",3.0,true]'),
    ("completion", '"prompt":["1",2]'),
    ("completion", '"prompt":["a",2]'),
    ("completion", '"prompt":[1.5]'),
    ("completion", '"prompt":[[1,2],[3]]'),
    ("completion", '"prompt":[["1"],[2.0]]'),
    ("completion", '"prompt":[[1],"a"]'),
    ("completion", '"prompt":[1,[2]]'),
    ("completion", '"prompt":[null]'),
    ("completion", '"prompt":5'),
    ("completion", '"prompt":"hi","max_tokens":"3"'),
    ("completion", '"prompt":"hi","max_tokens":3.0'),
    ("completion", '"prompt":"hi","max_tokens":3.5'),
    ("completion", '"prompt":"hi","stream":"yes"'),
    ("completion", '"prompt":"hi","stream":2'),
]

# Whole bodies, for what precedes the object.
RAW = [
    ("chat", b'\xef\xbb\xbf{"model":"m",' + MSG.encode() + b'}'),
    ("chat", b'\xef\xbb\xbf\xef\xbb\xbf{"model":"m",' + MSG.encode() + b'}'),
    ("completion", b'\xef\xbb\xbf{"model":"m","prompt":"hi"}'),
    ("chat", b' \n\t{"model":"m",' + MSG.encode() + b'}\r\n'),
    # detect_encoding: UTF-16 and UTF-32, with and without a mark
    ("chat", ('{"model":"m",' + MSG + ',"stream":"yes"}').encode("utf-16")),
    ("chat", ('{"model":"m",' + MSG + '}').encode("utf-16-be")),
    ("chat", ('{"model":"m",' + MSG + '}').encode("utf-16-le")),
    ("completion", '{"model":"m","prompt":"h\u00e9 \U0001F600"}'.encode("utf-32")),
    ("completion", '{"model":"m","prompt":"hi"}'.encode("utf-32-be")),
    ("completion", '{"model":"m","prompt":"hi"}'.encode("utf-32-le")),
    ("chat", ('{"model":"m",' + MSG + '}').encode("utf-16-le")[:-1]),
]


def verdict(endpoint: str, body: bytes):
    """Returns (accepted, facts, reason)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        return False, None, "json.loads: " + type(e).__name__
    model = Chat if endpoint == "chat" else Completion
    try:
        req = model.model_validate(data)
    except ValidationError as e:
        return False, None, "pydantic: " + e.errors()[0]["type"]
    except ValueError as e:
        return False, None, "validator: " + str(e)
    facts: dict[str, Any] = {"stream": bool(req.stream)}
    if endpoint == "chat":
        mt = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        if req.continue_final_message and req.add_generation_prompt:
            return False, None, "transformers: continue_final_message with add_generation_prompt"
        facts["add_generation_prompt"] = req.add_generation_prompt
        facts["continue_final_message"] = req.continue_final_message
    else:
        mt = req.max_tokens
        if req.prompt is None:
            return False, None, "validator: prompt required"
        p = req.prompt
        if isinstance(p, str):
            facts["prompt"] = {"texts": [p]}
        elif p and isinstance(p[0], list):
            facts["prompt"] = {"token_lists": p}
        elif p and isinstance(p[0], str):
            facts["prompt"] = {"texts": p}
        else:
            facts["prompt"] = {"tokens": p}
    if mt is not None and mt < 0:
        return False, None, "SamplingParams: max_tokens must be at least 1"
    if endpoint == "chat" or "max_tokens" in data:
        facts["max_tokens"] = mt
    return True, facts, ""


def lax_scalars(path: str):
    """pydantic_lax_scalars.tsv: random short strings over the characters
    that matter to str_as_int and str_as_bool, with pydantic's verdict for
    an int field and a bool field (Python input, lax), and the JSON number
    literals' int and bool verdicts."""
    import random

    from pydantic import TypeAdapter

    as_int, as_bool = TypeAdapter(int), TypeAdapter(bool)
    rnd = random.Random(31)
    alphabet = "0000111259__--++..  \t\n\u00a0eEx"
    inputs = sorted({"".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 7))) for _ in range(3000)})

    def run(ta, v):
        try:
            r = ta.validate_python(v)
        except ValidationError:
            return "-"
        return json.dumps(r)

    with open(path, "w") as f:
        f.write("# Generated by gen_vllm_verdicts.py: pydantic %s lax mode, Python input. do not edit.\n" % __import__("pydantic").VERSION)
        f.write("# kind\tinput (JSON)\tas int (JSON, - refused)\tas bool (JSON, - refused)\n")
        for s in inputs:
            f.write("string\t%s\t%s\t%s\n" % (json.dumps(s), run(as_int, s), run(as_bool, s)))
        numbers = ["0", "1", "2", "-1", "0.0", "1.0", "-0.0", "2.0", "0.5", "1e0", "1E0", "10e-1", "1e400", "-1e400",
                   "NaN", "Infinity", "-Infinity", "9223372036854775807", "9223372036854775808", "9.2e18", "9.3e18", "1e-400"]
        for lit in numbers:
            v = json.loads(lit)
            f.write("number\t%s\t%s\t%s\n" % (lit, run(as_int, v), run(as_bool, v)))


def main():
    lax_scalars(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pydantic_lax_scalars.tsv"))
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_verdicts.tsv")
    bodies = []
    for endpoint, frag in ROWS:
        fixed = '"model":"m",' + (MSG + "," if endpoint == "chat" else "")
        bodies.append((endpoint, ("{" + fixed + frag + "}").encode()))
    bodies += RAW
    with open(out, "w") as f:
        f.write("# Generated by gen_vllm_verdicts.py (see its docstring for the sources): do not edit.\n")
        f.write("# endpoint\tverdict\tfacts (what vLLM's model holds, JSON)\tbody (JSON string of the body's bytes, decoded as Latin-1)\twhy refused\n")
        for endpoint, body in bodies:
            ok, facts, why = verdict(endpoint, body)
            f.write("\t".join([
                endpoint,
                "accept" if ok else "refuse",
                json.dumps(facts, sort_keys=True) if ok else "-",
                json.dumps(body.decode("latin-1")),
                why or "-",
            ]) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
