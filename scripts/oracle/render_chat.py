#!/usr/bin/python3
"""Reference chat-template renderer for kvgate's golden tests.

Renders OpenAI chat requests with Python jinja2 configured exactly as
transformers' apply_chat_template (chat_template_utils._compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]), tojson = json.dumps(ensure_ascii=False,
sort_keys=False), raise_exception, strftime_now (fixed clock). Requests become
template variables the way vLLM does (entrypoints/chat_utils.py
parse_chat_messages + _postprocess_messages; serving_chat tool.model_dump()).

usage: render_chat.py CASES.json MODELS_DIR OUT.jsonl
"""
import datetime
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime.datetime(2026, 3, 7, 9, 5, 3)
TEXT_FIELDS = {"text": "text", "input_text": "text", "output_text": "text",
               "refusal": "refusal", "thinking": "thinking"}


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def compile_template(src):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(src)


def special_token(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def load_model(models_dir, model):
    with open(f"{models_dir}/{model}/tokenizer_config.json", encoding="utf-8") as f:
        cfg = json.load(f)
    templates = cfg["chat_template"]
    if isinstance(templates, str):
        templates = {"default": templates}
    else:
        templates = {t["name"]: t["template"] for t in templates}
    special = {}
    for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = special_token(cfg.get(k))
        if v is not None:
            special[k] = v
    if cfg.get("additional_special_tokens") is not None:
        special["additional_special_tokens"] = [special_token(t) for t in cfg["additional_special_tokens"]]
    return templates, special


def conversation(messages):
    """vLLM parse_chat_messages with the "string" content format."""
    out = []
    for m in messages:
        role = m["role"]
        content = m.get("content")
        if content is None:
            content = []
        elif isinstance(content, str):
            content = [{"type": "text", "text": content}]
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
                continue
            field = TEXT_FIELDS.get(part.get("type"))
            if field is None:
                raise ValueError("media parts are not rendered by this oracle")
            if part.get(field) is not None:
                texts.append(part[field])
        msg = {"role": role, "content": "\n".join(texts)}
        reasoning = m.get("reasoning", m.get("reasoning_content"))
        if role == "assistant":
            if m.get("tool_calls") is not None:
                msg["tool_calls"] = [
                    {"id": tc.get("id", ""), "type": tc.get("type", ""),
                     "function": {"name": tc["function"]["name"],
                                  "arguments": tc["function"].get("arguments")}}
                    for tc in m["tool_calls"]]
            if reasoning is not None:
                msg["reasoning"] = reasoning
                msg["reasoning_content"] = reasoning
        elif role == "tool":
            if "tool_call_id" in m:
                msg["tool_call_id"] = m["tool_call_id"]
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        out.append(msg)
    # _postprocess_messages: arguments strings become dicts; bad ones {}.
    for msg in out:
        if msg["role"] == "assistant" and "tool_calls" in msg:
            if len(msg["tool_calls"]) == 0:
                msg.pop("tool_calls")
                continue
            for tc in msg["tool_calls"]:
                a = tc["function"]["arguments"]
                if isinstance(a, str):
                    try:
                        tc["function"]["arguments"] = json.loads(a)
                    except json.JSONDecodeError:
                        tc["function"]["arguments"] = {}
                elif not isinstance(a, (dict, list)):
                    tc["function"]["arguments"] = {}
    return out


def tool_dump(tool):
    """pydantic model_dump() of vLLM's ChatCompletionToolsParam."""
    fn = tool.get("function", {})
    out_fn = {k: fn.get(k) for k in ("name", "description", "parameters")}
    for k, v in fn.items():
        if k not in out_fn:
            out_fn[k] = v
    out = {"type": tool.get("type", "function"), "function": out_fn}
    for k, v in tool.items():
        if k not in out:
            out[k] = v
    return out


def continue_final(rendered, final_message):
    """transformers apply_chat_template, continue_final_message branch."""
    if isinstance(final_message, (list, tuple)):
        for block in reversed(final_message):
            if "text" in block:
                final_message = block["text"]
                break
        else:
            raise ValueError("no text to continue")
    if final_message.strip() not in rendered:
        raise ValueError("final message not in rendered chat")
    loc = rendered.rindex(final_message.strip())
    if rendered[loc: loc + len(final_message.lstrip())] == final_message:
        return rendered[: loc + len(final_message.lstrip())]
    return rendered[: loc + len(final_message.strip())]


def render(case, models_dir):
    templates, special = load_model(models_dir, case["model"])
    if "template" in case:  # a case-specific template exercising one feature
        templates = {"default": case["template"]}
    req = case["request"]
    tools = [tool_dump(t) for t in req["tools"]] if req.get("tools") else None
    name = "tool_use" if tools and "tool_use" in templates else "default"
    tmpl = compile_template(templates[name])
    kwargs = dict(special)
    kwargs.update(req.get("chat_template_kwargs") or {})
    rendered = tmpl.render(messages=conversation(req["messages"]), tools=tools,
                           documents=req.get("documents"),
                           add_generation_prompt=req.get("add_generation_prompt", True),
                           **kwargs)
    if req.get("continue_final_message"):
        rendered = continue_final(rendered, req["messages"][-1].get("content"))
    return rendered


def main():
    cases_path, models_dir, out_path = sys.argv[1:4]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    with open(out_path, "w", encoding="utf-8") as out:
        for case in cases:
            line = {k: case[k] for k in ("name", "model", "template", "request") if k in case}
            try:
                line["expected"] = render(case, models_dir)
            except TemplateError as e:
                line["error"] = str(e)
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases to {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
