#!/usr/bin/env python3
"""Renders kvlm's chat-template test cases with Python jinja2 the way Hugging Face transformers does
(apply_chat_template: ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols), tojson
without HTML escaping, raise_exception, strftime_now) and writes tests/data/chat_template_cases.json.

Usage (from the repository root): python3 tools/reference/render_chat_templates.py [--data ../shared/models]
Reference tooling only: kvlm itself never runs Python.
"""
import argparse
import json
import os
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1722000000  # 2024-07-26 13:20 UTC: the same date in every time zone within +-10 h

TEMPLATES = {
    "smollm2": "shared:tokenizers/smollm2/chat_template.jinja",
    "smollm2-chatml": "shared:tokenizers/chat-templates/smollm2-chatml.jinja",
    "qwen2-chatml": "shared:tokenizers/chat-templates/qwen2-instruct_chatml.jinja",
    "llama3": "shared:tokenizers/chat-templates/llama3-instruct.jinja",
    "llama3.1": "shared:tokenizers/chat-templates/llama3.1-instruct.jinja",
    "mistral": "shared:tokenizers/chat-templates/mistral-instruct_v0.1-v0.2.jinja",
    "zephyr": "shared:tokenizers/chat-templates/zephyr-tinyllama-chat.jinja",
    "llama2": "repo:tests/data/templates/llama2-chat.jinja",
    "phi3": "repo:tests/data/templates/phi3-mini.jinja",
    "features": "repo:tests/data/templates/features.jinja",
}

TOKENS = {
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "smollm2": ("<|im_start|>", "<|im_end|>"),
    "smollm2-chatml": ("<|im_start|>", "<|im_end|>"),
    "qwen2-chatml": ("", "<|im_end|>"),
}

SYSTEM = {"role": "system", "content": "You are a terse assistant."}
CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [SYSTEM, {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "system_multi_turn": [
        SYSTEM,
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another?"},
    ],
    "awkward_content": [
        {"role": "user", "content": "  Spaces, \"quotes\", 'single', {{ not_a_tag }} {% raw %}\n\tw\u00f6rld \u2713  \n"},
        {"role": "assistant", "content": "\nA line\n\n"},
        {"role": "user", "content": ""},
    ],
    "two_users": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "ends_with_assistant": [
        SYSTEM,
        {"role": "user", "content": "Say hi"},
        {"role": "assistant", "content": "hi"},
    ],
}

PREFIX_CONVERSATIONS = [
    CONVERSATIONS["system_multi_turn"] + [{"role": "assistant", "content": "Green."}],
    CONVERSATIONS["multi_turn"] + [{"role": "assistant", "content": "No."}],
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. \"Paris\""}},
            "required": ["city"],
        },
    },
}

# llama3.1 extras rendered through ChatTemplate::render_json (tools, tool calls, dates).
JSON_CASES = {
    "llama3.1": {
        "tools_in_user_message": {
            "messages": CONVERSATIONS["system_user"], "tools": [WEATHER_TOOL]},
        "tools_in_system": {
            "messages": CONVERSATIONS["system_user"], "tools": [WEATHER_TOOL], "tools_in_user_message": False},
        "tool_call_round_trip": {
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "22C, sunny"},
                {"role": "ipython", "content": {"temperature": 22, "unit": "C", "ok": True, "note": None}},
            ],
            "tools": [WEATHER_TOOL], "tools_in_user_message": False},
        "builtin_tools": {
            "messages": [
                {"role": "user", "content": "Search for kvlm"},
                {"role": "assistant", "tool_calls": [
                    {"function": {"name": "brave_search", "arguments": {"query": "kvlm", "count": "3"}}}]},
            ],
            "builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]},
        "custom_tools_and_date": {
            "messages": CONVERSATIONS["multi_turn"], "custom_tools": [WEATHER_TOOL], "date_string": "01 Jan 2025"},
        "tools_without_user_message": {"messages": [SYSTEM], "tools": [WEATHER_TOOL]},
        "two_tool_calls": {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {}}},
                                                     {"function": {"name": "b", "arguments": {}}}]},
            ]},
    },
}


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(NOW).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def read_template(ref, data_dir):
    kind, path = ref.split(":", 1)
    full = os.path.join(data_dir if kind == "shared" else ".", path)
    with open(full, encoding="utf-8") as f:
        return f.read()


def render(template, context):
    # transformers always passes tools and documents (None unless given).
    try:
        return {"expected": template.render(**{"tools": None, "documents": None, **context})}
    except jinja2.exceptions.UndefinedError as e:
        return {"error": str(e), "raised": False}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e), "raised": True}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=os.environ.get("KVLM_TEST_DATA", "../shared/models"))
    parser.add_argument("--out", default="tests/data/chat_template_cases.json")
    args = parser.parse_args()
    env = make_env()
    cases, prefix = [], {}
    for name, ref in TEMPLATES.items():
        template = env.from_string(read_template(ref, args.data))
        bos, eos = TOKENS.get(name, ("<s>", "</s>"))
        for conv_name, messages in CONVERSATIONS.items():
            for gen in (False, True):
                context = {"messages": messages, "add_generation_prompt": gen, "bos_token": bos, "eos_token": eos}
                case = {"name": f"{name}/{conv_name}/gen={int(gen)}", "template": ref, "api": "render",
                        "context": context}
                case.update(render(template, context))
                cases.append(case)
        for case_name, extra in JSON_CASES.get(name, {}).items():
            for gen in (False, True):
                context = {"add_generation_prompt": gen, "bos_token": bos, "eos_token": eos, **extra}
                case = {"name": f"{name}/{case_name}/gen={int(gen)}", "template": ref, "api": "json",
                        "context": context}
                case.update(render(template, context))
                cases.append(case)
        if name != "features":
            prefix[ref] = prefix_properties(template)
    out = {"generator": "tools/reference/render_chat_templates.py", "jinja2": jinja2.__version__, "now": NOW,
           "cases": cases,
           "prefix_conversations": PREFIX_CONVERSATIONS, "prefix_property": prefix}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out}")
    for ref, p in prefix.items():
        print(f"  {ref}: {p}")


def prefix_properties(template):
    """For each template and conversation m in PREFIX_CONVERSATIONS (k >= 1):
    append: render(m[:k], gen=False) is a prefix of render(m[:k+1]) for every k (both renders succeed).
    generation: render(m[:k], gen=True) is a prefix of render(m[:k+1]) when m[k] is the assistant's reply."""
    result = {"append": True, "generation": True}
    for conv in PREFIX_CONVERSATIONS:
        for k in range(1, len(conv)):
            try:
                longer = template.render(messages=conv[:k + 1], add_generation_prompt=False, bos_token="<s>",
                                         eos_token="</s>")
                plain = template.render(messages=conv[:k], add_generation_prompt=False, bos_token="<s>",
                                        eos_token="</s>")
                gen = template.render(messages=conv[:k], add_generation_prompt=True, bos_token="<s>",
                                      eos_token="</s>")
            except jinja2.exceptions.TemplateError:
                continue
            if not longer.startswith(plain):
                result["append"] = False
            if conv[k]["role"] == "assistant" and not longer.startswith(gen):
                result["generation"] = False
    return result


if __name__ == "__main__":
    main()
