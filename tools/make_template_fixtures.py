#!/usr/bin/env python3
"""Chat-template fixtures: renders a fixed set of conversations with real chat templates.

Usage: make_template_fixtures.py OUTDIR TOKDIR [TOKDIR...]

Each TOKDIR holds a tokenizer (tokenizer_config.json + tokenizer.json or tokenizer.json.gz,
optionally chat_template.jinja). For each, OUTDIR/<basename(TOKDIR)>.json gets the inputs and
what transformers' apply_chat_template(..., tokenize=False) returned, or the exception it
raised (type and message), plus the library versions. The oracle is transformers itself;
--engine jinja2 renders with a local replica of its Jinja environment instead (for
development only: such files are marked "oracle": "jinja2-replica").
"""
import argparse
import gzip
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Températures en °C — 天气",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.\nReturns a list of results.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "number", "default": 5.0},
                "threshold": {"type": "number", "default": 1e-07},
                "safe": {"type": "boolean", "default": True},
                "filters": {"type": "object", "properties": {"site": {"type": ["string", "null"]}}},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        },
    },
}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thank you. How can I help?"}
U2 = {"role": "user", "content": "What is 2 + 2?"}
A2 = {"role": "assistant", "content": "2 + 2 = 4."}
U3 = {"role": "user", "content": "And 3 * 3?"}


def call(id_, name, args):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


def cases():
    c = []

    def add(name, messages, tools=None, gen=True, **kwargs):
        c.append({"name": name, "messages": messages, "tools": tools, "add_generation_prompt": gen, "kwargs": kwargs})

    add("single_user_gen", [U1])
    add("single_user_nogen", [U1], gen=False)
    add("system_user", [SYS, U1])
    add("system_user_nogen", [SYS, U1], gen=False)
    add("multi_turn", [SYS, U1, A1, U2])
    add("multi_turn_no_system", [U1, A1, U2, A2, U3])
    add("ends_with_assistant", [U1, A1], gen=False)
    add("unicode", [{"role": "user", "content": "Ça va? 日本語のテキスト 🚀🎉 — Привет, мир! مرحبا \u00a0nbsp\u2028sep"}])
    add("empty_user", [{"role": "user", "content": ""}])
    add("whitespace_content", [{"role": "user", "content": "  \n padded text \t\n "}, {"role": "assistant", "content": "\n answer \n"}, U2])
    add("special_chars", [{"role": "user", "content": "Quotes ' \" backslash \\ braces {{ x }} {% if %} {# c #} <|im_end|> \\n"}])
    add("long_content", [{"role": "user", "content": " ".join(f"word{i}" for i in range(400))}])
    add("parts_text", [{"role": "user", "content": [{"type": "text", "text": "Describe this."}]}])
    add("parts_image_text", [{"role": "user", "content": [{"type": "image", "image": "http://x/y.png"}, {"type": "text", "text": "What is in the image?"}]}])
    add("system_parts", [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, U1])
    add("tools_user", [U1], tools=[WEATHER_TOOL])
    add("tools_system_user", [SYS, {"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("tools_empty_list", [U1], tools=[])
    add("tool_call_dict_args", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "get_weather", {"city": "Paris", "days": 3})]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
    ], tools=[WEATHER_TOOL])
    add("tool_call_string_args", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "get_weather", "{\"city\": \"Paris\"}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ], tools=[WEATHER_TOOL])
    add("tool_calls_multiple", [
        SYS,
        {"role": "user", "content": "Weather in Paris and Tokyo, and search news."},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            call("c1", "get_weather", {"city": "Paris", "unit": "celsius"}),
            call("c2", "get_weather", {"city": "東京", "unit": "fahrenheit"}),
            call("c3", "search", {"query": "news", "max_results": 2.0, "safe": False, "filters": {"site": None}, "tags": ["a", "b"]}),
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "c2", "content": "75 F"},
        {"role": "tool", "tool_call_id": "c3", "content": "[]"},
        {"role": "assistant", "content": "Paris is 18 C, Tokyo 75 F."},
        {"role": "user", "content": "Thanks!"},
    ], tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("tool_call_no_function_wrapper", [
        {"role": "user", "content": "Search cats"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "search", "arguments": {"query": "cats"}}]},
    ], tools=[SEARCH_TOOL], gen=False)
    add("tool_call_null_content", [
        {"role": "user", "content": "Search dogs"},
        {"role": "assistant", "content": None, "tool_calls": [call("c9", "search", {"query": "dogs"})]},
        {"role": "tool", "tool_call_id": "c9", "content": "found"},
    ], tools=[SEARCH_TOOL])
    add("reasoning_content_last", [
        U2, {"role": "assistant", "content": "4", "reasoning_content": "Adding two and two gives four."},
    ], gen=False)
    add("reasoning_content_history", [
        U2, {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."}, U3,
    ])
    add("inline_think", [
        U2, {"role": "assistant", "content": "<think>\nLet me add.\n</think>\n\nIt is 4."},
    ], gen=False)
    add("inline_think_history", [
        U2, {"role": "assistant", "content": "<think>\nLet me add.\n</think>\n\nIt is 4."}, U3,
    ])
    add("enable_thinking_false", [U1], enable_thinking=False)
    add("enable_thinking_true", [U1], enable_thinking=True)
    add("enable_thinking_false_nogen", [U1, A1], gen=False, enable_thinking=False)
    add("tool_response_as_user", [
        {"role": "user", "content": "Do it"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "search", {"query": "x"})]},
        {"role": "user", "content": "<tool_response>\nok\n</tool_response>"},
    ], tools=[SEARCH_TOOL])
    add("system_only", [SYS])
    add("consecutive_users", [U1, U2])
    add("assistant_first", [A1, U1])
    add("extra_kwargs", [U1], custom_flag=True, date_string="01 Jan 2025")
    add("extra_message_keys", [{"role": "user", "content": "Hi", "name": "bob", "metadata": {"k": 1}}])
    add("tool_result_json", [
        {"role": "user", "content": "Compute"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "search", {"query": "π ≈ 3.14159", "max_results": -3})]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"result\": [1, 2.5, null, true]}"},
        {"role": "assistant", "content": "Done."},
    ], tools=[SEARCH_TOOL], gen=False)
    add("no_messages", [])
    add("multiline_system", [{"role": "system", "content": "Line one.\n\nLine two.\n"}, U1, A1, U2])
    return c


def replica_env():
    import jinja2
    import jinja2.ext
    from datetime import datetime
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def prepare_dir(tokdir):
    """Copies TOKDIR to a temp dir, un-gzipping tokenizer.json.gz when needed."""
    tmp = tempfile.mkdtemp(prefix="tmplfix-")
    for name in os.listdir(tokdir):
        src = os.path.join(tokdir, name)
        if name == "tokenizer.json.gz":
            with gzip.open(src, "rb") as fin, open(os.path.join(tmp, "tokenizer.json"), "wb") as fout:
                shutil.copyfileobj(fin, fout)
        elif os.path.isfile(src):
            shutil.copy(src, os.path.join(tmp, name))
    return tmp


def template_source(tokdir):
    p = os.path.join(tokdir, "chat_template.jinja")
    if os.path.exists(p):
        return open(p, encoding="utf-8").read()
    cfg = json.load(open(os.path.join(tokdir, "tokenizer_config.json"), encoding="utf-8"))
    return cfg.get("chat_template")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("tokdirs", nargs="+")
    ap.add_argument("--engine", choices=["transformers", "jinja2"], default="transformers")
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    import jinja2

    versions = {"python": platform.python_version(), "jinja2": jinja2.__version__}
    if args.engine == "transformers":
        import transformers
        from transformers import AutoTokenizer

        versions["transformers"] = transformers.__version__
    for tokdir in args.tokdirs:
        name = os.path.basename(os.path.normpath(tokdir))
        source = template_source(tokdir)
        if not isinstance(source, str):
            source = json.dumps(source, ensure_ascii=False)
        out = {
            "template": name,
            "oracle": "transformers.apply_chat_template" if args.engine == "transformers" else "jinja2-replica",
            "versions": versions,
            "template_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
            "cases": [],
        }
        try:
            if args.engine == "transformers":
                tok = AutoTokenizer.from_pretrained(prepare_dir(tokdir))

                def render(case):
                    return tok.apply_chat_template(case["messages"], tools=case["tools"],
                                                   add_generation_prompt=case["add_generation_prompt"],
                                                   tokenize=False, **case["kwargs"])
            else:
                cfg = json.load(open(os.path.join(tokdir, "tokenizer_config.json"), encoding="utf-8"))
                special = {}
                for k in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"):
                    v = cfg.get(k)
                    if isinstance(v, dict):
                        v = v.get("content")
                    if v:
                        special[k] = v
                tmpl = replica_env().from_string(source)

                def render(case):
                    return tmpl.render(messages=case["messages"], tools=case["tools"], documents=None,
                                       add_generation_prompt=case["add_generation_prompt"],
                                       **{**special, **case["kwargs"]})
        except Exception as e:  # keep going: one broken tokenizer must not lose the others
            out["load_error"] = f"{type(e).__name__}: {e}"
            print(f"{name}: cannot load: {out['load_error']}", file=sys.stderr)
            json.dump(out, open(os.path.join(args.outdir, name + ".json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
            continue
        for case in cases():
            rec = dict(case)
            try:
                rec["expected"] = render(case)
            except Exception as e:
                rec["error_type"] = type(e).__name__
                rec["error"] = str(e)
            out["cases"].append(rec)
        with open(os.path.join(args.outdir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
        n_err = sum("error" in r for r in out["cases"])
        print(f"{name}: {len(out['cases'])} cases, {n_err} errors")


if __name__ == "__main__":
    main()
