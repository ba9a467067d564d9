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

# The 37 templates of ollama's index get fewer conversations to keep the expected file small.
INDEX_CONVERSATIONS = ["user", "system_multi_turn", "awkward_content"]

PREFIX_CONVERSATIONS = [
    CONVERSATIONS["system_multi_turn"] + [{"role": "assistant", "content": "Green."}],
    CONVERSATIONS["multi_turn"] + [{"role": "assistant", "content": "No."}],
]

# Small inline templates probing single features (scoping, filters, literals, whitespace control),
# rendered with CONVERSATIONS["ends_with_assistant"].
SNIPPETS = [
 "{% set x = 'outer' %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
 "{% for i in [1,2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}",
 "{{ messages[0]['content'] | upper }} {{ messages | last | attr('role') if false else (messages|last).role }}",
 "{{ 'a' if true }}{{ 'b' if false }}|{{ [1,2,3] | join }}|{{ [1,[2,3]] }}|{{ {'a': 'b'} }}|{{ 1.5e3 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}",
 "{{ 'abc' ~ 1.0 }} {{ true ~ none }} {{ -0.0 }} {{ 10 // 3.0 }} {{ 2 ** -1 }} {{ 7 % -3 }}",
 "{%- for m in messages -%}\n  {{ loop.index }}{{ loop.revindex }}{{ loop.previtem.role if loop.previtem is defined else '-' }}\n{% endfor %}",
 "  {%- if true %}  x  {% endif -%}  \n  y\n  {% if true %}\n    z\n  {% endif %}\n",
 "{{ \"multi\nline\" }}{# c #}\n{#- c2 -#}\n  end",
 "{{ messages | map(attribute='content') | map('upper') | join('/') }}",
 "{{ messages | selectattr('role', 'in', ['user', 'system']) | map(attribute='role') | list }}",
 "{{ 'x' in messages[0].content }} {{ messages[0] is mapping }} {{ messages is iterable }} {{ 5 is odd }}",
 "{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=3) }}{{ m(a=4) }}",
 "{{ '  a b  '.split(' ') }} {{ 'a-b-c'.split('-', 1) }} {{ 'abc'.replace('b', 'X') }} {{ 'Hi'.lower() }}{{ 'x'.upper() }}",
 "{{ messages[1:][0].role }} {{ messages[:-1] | length }} {{ messages[::2] | length }} {{ 'hello'[1:3] }}",
 "{{ (messages | length) > 1 and 'many' or 'few' }} {{ not messages }} {{ messages|length is even }}",
 "{% if messages[0].content is string and messages[0].content|length > 0 %}ok{% endif %}",
 "{{ {'b': 1, 'a': [1, 2]} | tojson }} {{ 'é\"\\\\' | tojson }} {{ [] | tojson(indent=2) }}",
 "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(3, 0, -1) | list }}",
 "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
 "{{ '%s' }} {{ \"it's\" }} {{ 'a\\tb' }} {{ '\\x41\\u00e9' }}",
 "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'system' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
 "{{ messages[0].get('role') }} {{ messages[0].get('nope', 'dflt') }} {{ messages[0].keys() | list }}",
 "{{ none | string }} {{ 3 | string }} {{ '3' | int + 1 }} {{ 'x' | int }} {{ 2.7 | int }} {{ '2.5' | float }}",
 "{{ 'The quick' | wordcount if false else 'ok' }} {{ 'abc' | first }}{{ 'abc' | last }} {{ [3,1] | max if false else 1 }}",
 "{{ messages | rejectattr('role', 'equalto', 'user') | list | length }} {{ [0, 1, '', 'a'] | select | list }}",
 "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ [1] == [1] }} {{ none == none }} {{ undefined == undefined }}",
 "{{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('c') }} {{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|",
 "{{ x.y if x is defined else 'undef' }} {{ messages[5] is defined }} {{ messages[0].nothing is defined }}",
 "{% for m in messages %}{% if loop.first %}[{% endif %}{{ m.role[0] }}{% if not loop.last %},{% else %}]{% endif %}{% endfor %}",
 "{%- set sys = messages[0].content if messages[0].role == 'system' else '' -%}\n{{- sys | trim }}|",
 "{{ 'a' * 3 }}{{ [1] * 2 }}{{ 3 - 5 }}{{ 1 + 2 * 3 }}{{ (1 + 2) * 3 }}{{ 2 ** 3 ** 2 }}{{ -2 ** 2 }}",
 "{{ 'abc' | capitalize }} {{ 'hELLO wORLD' | capitalize }} {{ 'hello-world foo_bar' | title }}",
 "{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
 "{{ messages[0]['content'][:5] }}{{ messages[-1]['content'][-3:] }}",
]
SNIPPETS += [  # runtime errors in jinja2 too
 "{{ nothing.attr }}",
 "{{ messages[0].content + 1 }}",
 "{{ messages[9]['role'] }}",
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


INDEX_FILE = "tokenizers/chat-templates/ollama_template_index.json"


def read_template(ref, data_dir):
    kind, path = ref.split(":", 1)
    if kind == "index":  # entry N of ollama's list of real Hugging Face templates
        with open(os.path.join(data_dir, INDEX_FILE), encoding="utf-8") as f:
            return json.load(f)[int(path)]["template"]
    full = os.path.join(data_dir if kind == "shared" else ".", path)
    with open(full, encoding="utf-8") as f:
        return f.read()


def render(template, context):
    # transformers always passes tools and documents (None unless given).
    try:
        return {"expected": template.render(**{"tools": None, "documents": None, **context})}
    except jinja2.exceptions.UndefinedError as e:
        return {"error": str(e), "raised": False}
    except jinja2.exceptions.TemplateError as e:  # raise_exception
        return {"error": str(e), "raised": True}
    except (TypeError, ValueError) as e:  # e.g. 'a' + 1
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=os.environ.get("KVLM_TEST_DATA", "../shared/models"))
    parser.add_argument("--out", default="tests/data/chat_template_cases.json")
    args = parser.parse_args()
    env = make_env()
    cases, prefix = [], {}
    templates = dict(TEMPLATES)
    with open(os.path.join(args.data, INDEX_FILE), encoding="utf-8") as f:
        for i, entry in enumerate(json.load(f)):
            templates[f"index{i}-{entry['name']}"] = f"index:{i}"
    for name, ref in templates.items():
        template = env.from_string(read_template(ref, args.data))
        bos, eos = TOKENS.get(name, ("<s>", "</s>"))
        conversations = CONVERSATIONS if ref.startswith(("shared:", "repo:")) else INDEX_CONVERSATIONS
        for conv_name in conversations:
            messages = CONVERSATIONS[conv_name]
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
    for i, source in enumerate(SNIPPETS):
        context = {"messages": CONVERSATIONS["ends_with_assistant"], "add_generation_prompt": True,
                   "bos_token": "<s>", "eos_token": "</s>"}
        case = {"name": f"snippet{i}", "template": "inline", "source": source, "api": "render", "context": context}
        case.update(render(env.from_string(source), context))
        cases.append(case)
    out = {"generator": "tools/reference/render_chat_templates.py", "jinja2": jinja2.__version__, "now": NOW,
           "cases": cases,
           "prefix_conversations": PREFIX_CONVERSATIONS, "prefix_property": prefix}
    with open(args.out, "w", encoding="utf-8") as f:  # one case per line: readable diffs, small file
        head = {k: v for k, v in out.items() if k != "cases"}
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
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
