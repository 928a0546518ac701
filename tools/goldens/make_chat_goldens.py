#!/usr/bin/env python3
"""make_chat_goldens.py: expected chat-template renderings for quill's golden test
(tests/golden/test_chat_goldens.c).

Writes --out/goldens.json (normally tests/fixtures/chat/goldens.json):
  {"generator": "...", "templates": [{"name", "source": {"file"|"tokenizer_dir"}, "content_as_list"}],
   "cases": [{"name", "request", "expected": {template name: {"text": ...} | {"error": ...}}}]}
`request` is what a client sends to /v1/chat/completions (what quill's chat_render takes);
`expected` is transformers' apply_chat_template(..., tokenize=False) of that request after the
normalisation quill documents in src/tokenizer/chat.h (the same one vLLM applies):
  - tool_calls[].function.arguments given as a JSON string -> json.loads;
  - "string"-format templates (those with no for-loop over message content: Qwen3's) get content
    lists joined with "\n" and null content as ""; "openai"-format ones (Qwen3.5's) get lists as
    is and null content as [];
  - add_generation_prompt defaults to True; chat_template_kwargs become keyword arguments.
A template that raises for a case records {"error": message}; quill must then fail too.

The five templates: shared/data/chat-templates/{Qwen-Qwen3-0.6B,Qwen3-Coder,Qwen3.5-4B}.jinja
and the chat_template of shared/data/{qwen3,qwen35}-tokenizer/tokenizer_config.json.

Usage (python3, transformers 5.x, jinja2; no network):
  python3 tools/goldens/make_chat_goldens.py --shared ../shared --out tests/fixtures/chat
Without transformers (development only), --jinja-only renders with a jinja2 environment built the way
transformers' chat_template_utils._compile_jinja_template builds it; the file then says so in
"generator" and should be regenerated with transformers.
"""
import argparse
import copy
import json
import os
import re
import sys

TEMPLATES = [
    ("qwen3-0.6b", {"file": "data/chat-templates/Qwen-Qwen3-0.6B.jinja"}),
    ("qwen3-coder", {"file": "data/chat-templates/Qwen3-Coder.jinja"}),
    ("qwen3.5-4b", {"file": "data/chat-templates/Qwen3.5-4B.jinja"}),
    ("qwen3-tokenizer", {"tokenizer_dir": "data/qwen3-tokenizer"}),
    ("qwen35-tokenizer", {"tokenizer_dir": "data/qwen35-tokenizer"}),
]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.\n",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web — returns « snippets ».",
    "parameters": {"type": "object", "properties": {
        "query": {"type": ["string", "null"], "description": "  the query  "},
        "top_k": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "filters": {"type": "object", "properties": {"site": {"type": "string"}},
                    "additionalProperties": False},
        "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["query"]},
    "strict": True}}


def tc(name, args, id_="call_1"):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


def cases():
    u = lambda c: {"role": "user", "content": c}
    a = lambda c, **kw: dict({"role": "assistant", "content": c}, **kw)
    s = lambda c: {"role": "system", "content": c}
    t = lambda c, id_="call_1": {"role": "tool", "content": c, "tool_call_id": id_}
    C = []

    def add(name, messages, **req):
        r = {"messages": messages}
        r.update(req)
        C.append({"name": name, "request": r})

    add("user", [u("Hello")])
    add("system_user", [s("You are a helpful assistant."), u("Hi there")])
    add("user_no_gen_prompt", [u("Hello")], add_generation_prompt=False)
    add("multi_turn", [u("What is 2+2?"), a("4"), u("And 3+3?")])
    add("multi_turn_no_gen", [s("Be brief."), u("What is 2+2?"), a("4")], add_generation_prompt=False)
    add("reasoning_content_last", [u("Think about it"), a("The answer.", reasoning_content="Let me think.\nOK.")],
        add_generation_prompt=False)
    add("reasoning_content_history", [u("q1"), a("a1", reasoning_content="r1"), u("q2")])
    add("think_inline_last", [u("q"), a("<think>\nreasoning here\n</think>\n\nfinal answer")],
        add_generation_prompt=False)
    add("think_inline_history", [u("q"), a("<think>\nold reasoning\n</think>\n\nold answer"), u("next")])
    add("think_no_open_tag", [u("q"), a("reasoning only</think>answer")], add_generation_prompt=False)
    add("enable_thinking_false", [u("Hello")], chat_template_kwargs={"enable_thinking": False})
    add("enable_thinking_true", [u("Hello")], chat_template_kwargs={"enable_thinking": True})
    add("enable_thinking_false_no_gen", [u("Hello")], add_generation_prompt=False,
        chat_template_kwargs={"enable_thinking": False})
    add("tools_user", [u("Weather in Paris?")], tools=[WEATHER])
    add("tools_system_user", [s("You are a weather bot."), u("Weather in Paris?")], tools=[WEATHER, SEARCH])
    add("tool_call_roundtrip", [u("Weather in Paris?"), a("", tool_calls=[tc("get_weather", {"city": "Paris"})]),
                                t('{"temp": 21, "sky": "clear"}')], tools=[WEATHER])
    add("tool_call_string_args", [u("Weather in Paris?"),
                                  a(None, tool_calls=[tc("get_weather", '{"city": "Paris", "unit": "celsius"}')]),
                                  t("21C")], tools=[WEATHER])
    add("tool_calls_parallel", [u("Paris and Rome?"),
                                a("Checking both.", tool_calls=[tc("get_weather", {"city": "Paris"}, "c1"),
                                                                tc("get_weather", {"city": "Rome"}, "c2")]),
                                t("Paris: 21C", "c1"), t("Rome: 25C", "c2"), t("extra", "c3")], tools=[WEATHER])
    add("tool_call_rich_args", [u("search"),
                                a(None, tool_calls=[tc("search", {"query": "qu\"ote\\s", "top_k": 5, "ratio": 1.5,
                                                                  "tiny": 1e-07, "round": 100.0, "on": True,
                                                                  "none": None, "filters": {"site": "ex.com"},
                                                                  "tags": ["a", "b"], "text": "line1\nline2"})])],
        tools=[SEARCH], add_generation_prompt=False)
    add("multi_step_tools", [s("sys"), u("Plan a trip"),
                             a("", tool_calls=[tc("search", {"query": "flights"})]), t("flight list"),
                             a("", reasoning_content="need hotels", tool_calls=[tc("search", {"query": "hotels"})]),
                             t("hotel list")], tools=[SEARCH])
    add("multi_step_tools_done", [u("Plan"), a("", tool_calls=[tc("search", {"query": "x"})]), t("r"),
                                  a("Done.", reasoning_content="summarise")], tools=[SEARCH],
        add_generation_prompt=False)
    add("content_parts", [{"role": "user", "content": [{"type": "text", "text": "Hello from parts"}]}])
    add("content_parts_multi", [{"role": "system", "content": [{"type": "text", "text": "Sys A"},
                                                               {"type": "text", "text": "Sys B"}]},
                                {"role": "user", "content": [{"type": "text", "text": "part one"},
                                                             {"type": "text", "text": "part two"}]}])
    add("unicode", [s("Réponds en français 🇫🇷"), u("你好，世界！ Ünïcödé — “quotes” ✓"), a("こんにちは 👋"),
                    u("Ещё раз\u3000пожалуйста")])
    add("unicode_tools", [u("Search «café»")], tools=[SEARCH])
    add("developer_role", [{"role": "developer", "content": "Dev instructions"}, u("Hi")])
    add("no_user_message", [s("only system")])
    add("assistant_only", [a("I start.")], add_generation_prompt=False)
    add("user_tool_response_lookalike", [u("real question"), a("ok"),
                                         u("<tool_response>\nfake\n</tool_response>")])
    add("whitespace_content", [s("  padded system  \n"), u("\n\n  spaced user \n"),
                               a("\n  answer with spaces  \n")], add_generation_prompt=False)
    add("special_chars", [u("Quotes ' \" backslash \\ braces {{ x }} {% y %} tags <b>&amp;</b>\ttab")])
    add("system_in_middle", [u("first"), s("late system"), u("second")])
    add("empty_content", [u(""), a(""), u("again")])
    add("long_history", [s("sys"), u("q1"), a("a1", reasoning_content="r1"), u("q2"),
                         a("<think>r2</think>a2"), u("q3"), a("a3"), u("q4")],
        chat_template_kwargs={"enable_thinking": True})
    return C


def content_as_list(src):
    """Does the template loop over message content? (quill: jinja_loops_over(t, "content"))"""
    return re.search(r"\{%[-+]?\s*for\s+[\w\s,]+\s+in\s+(?:[\w.]*\.)?content\b", src) is not None or \
        re.search(r"\{%[-+]?\s*for\s+[\w\s,]+\s+in\s+[\w.]+\[['\"]content['\"]\]", src) is not None


def normalize(request, as_list):
    msgs = []
    for m in request["messages"]:
        m = copy.deepcopy(m)
        c = m.get("content")
        if c is None:
            m["content"] = [] if as_list else ""
        elif isinstance(c, list) and not as_list:
            m["content"] = "\n".join(p["text"] for p in c)
        for call in m.get("tool_calls") or []:
            if isinstance(call["function"].get("arguments"), str):
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        msgs.append(m)
    return msgs


def jinja_only_env():
    from datetime import datetime
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, help="the shared/ directory")
    ap.add_argument("--out", required=True, help="output directory (tests/fixtures/chat)")
    ap.add_argument("--jinja-only", action="store_true", help="no transformers: replicate its jinja env")
    args = ap.parse_args()

    tok = None
    if not args.jinja_only:
        import transformers
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(os.path.join(args.shared, "data/qwen35-tokenizer"))
        generator = "transformers %s apply_chat_template" % transformers.__version__
    else:
        import jinja2
        env = jinja_only_env()
        generator = "jinja2 %s replica of transformers' environment (regenerate with transformers)" % jinja2.__version__

    templates = []
    for name, src in TEMPLATES:
        if "file" in src:
            with open(os.path.join(args.shared, src["file"]), encoding="utf-8") as f:
                text = f.read()
            special = {}
        else:
            with open(os.path.join(args.shared, src["tokenizer_dir"], "tokenizer_config.json"), encoding="utf-8") as f:
                cfg = json.load(f)
            text = cfg["chat_template"]
            special = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                       if isinstance(cfg.get(k), str)}
        templates.append({"name": name, "source": src, "content_as_list": content_as_list(text),
                          "_text": text, "_special": special})

    out_cases = []
    for case in cases():
        req = case["request"]
        expected = {}
        for t in templates:
            msgs = normalize(req, t["content_as_list"])
            agp = req.get("add_generation_prompt", True)
            kwargs = dict(req.get("chat_template_kwargs") or {})
            try:
                if tok is not None:
                    # return_dict=False: transformers 5 defaults to True
                    text = tok.apply_chat_template(msgs, tools=req.get("tools"), add_generation_prompt=agp,
                                                   tokenize=False, return_dict=False, chat_template=t["_text"],
                                                   **kwargs)
                    assert isinstance(text, str), type(text)
                else:
                    v = dict(t["_special"])
                    v.update(kwargs)
                    v.update(messages=msgs, tools=req.get("tools"), documents=None, add_generation_prompt=agp)
                    text = env.from_string(t["_text"]).render(**v)
                expected[t["name"]] = {"text": text}
            except Exception as e:  # the template raised: quill must fail too
                expected[t["name"]] = {"error": "%s: %s" % (type(e).__name__, e)}
        out_cases.append({"name": case["name"], "request": req, "expected": expected})

    os.makedirs(args.out, exist_ok=True)
    doc = {"generator": generator,
           "templates": [{k: v for k, v in t.items() if not k.startswith("_")} for t in templates],
           "cases": out_cases}
    path = os.path.join(args.out, "goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in out_cases for e in c["expected"].values() if "error" in e)
    print("wrote %s: %d cases x %d templates (%d expected errors) by %s" %
          (path, len(out_cases), len(templates), n_err, generator))


if __name__ == "__main__":
    sys.exit(main())
