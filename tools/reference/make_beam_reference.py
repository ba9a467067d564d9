#!/usr/bin/env python3
"""Writes tests/data/beam_reference.json: beam-search results on stories260K from the independent float64
reference forward (llama_reference.py) and a port of Hugging Face transformers 4.46.3's beam search
(generation/utils.py `_beam_search` with BeamSearchScorer and BeamHypotheses from generation/beam_search.py:
num_beams=N, do_sample=False, early_stopping=False, no logits processors), for tests/generate/test_beam_search.cpp.

What is ported, line for line in meaning: beam scores start at 0 for beam 0 and -1e9 for the others; each
step takes log_softmax of the float32 logits plus the beam scores, the top 2N (beam, token) pairs sorted
best first; an EOS among the top N adds a hypothesis scored sum / (cur_len - prompt_len)^length_penalty
(cur_len counting the EOS), other pairs fill the next N beams; the search is done when N hypotheses exist
and the worst of them >= best candidate score / (cur_len - prompt_len)^length_penalty; at max_new_tokens the
running beams are added with their own lengths; the best hypothesis wins. Prompts are token ids (BOS first)
so no tokenizer is involved. Takes under a minute on 2 cores.
  usage: python3 tools/reference/make_beam_reference.py [--gguf PATH] [--out tests/data/beam_reference.json]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import LlamaReference  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STORIES_EOS = (2,)  # </s> (stories260K never produces it greedily: its cases end at the token limit)
SMOLLM2_EOS = (2, 0)  # <|im_end|> and <|endoftext|>: the end-of-generation tokens kvlm's model file names


def snapshot(ref):
    return ([list(k) for k in ref.k_cache], [list(v) for v in ref.v_cache], ref.pos)


def restore(ref, state):
    ref.k_cache = [list(k) for k in state[0]]
    ref.v_cache = [list(v) for v in state[1]]
    ref.pos = state[2]


def log_softmax32(logits):
    x = logits.astype(np.float32)
    m = x.max()
    return x - m - np.float32(np.log(np.exp((x - m).astype(np.float64)).sum()))


def beam_search(ref, prompt, n_beams, length_penalty, max_new, eos):
    ref.reset()
    logits = None
    for t in prompt:
        logits = ref.step(t)
    start = snapshot(ref)
    beams = [{"tokens": [], "score": np.float32(0.0 if b == 0 else -1e9), "state": start, "logits": logits}
             for b in range(n_beams)]
    hyps = []  # (score, tokens, ended)
    worst = 1e9

    def add(tokens, sum_logprobs, generated_len, ended):
        nonlocal worst
        score = float(sum_logprobs) / (generated_len ** length_penalty)
        if len(hyps) < n_beams or score > worst:
            hyps.append((score, tokens, ended))
            if len(hyps) > n_beams:
                hyps.remove(min(hyps, key=lambda h: h[0]))
            worst = min(h[0] for h in hyps)

    done = False
    for step in range(max_new):
        cur_len = step + 1
        scores = np.stack([log_softmax32(b["logits"]) + b["score"] for b in beams]).astype(np.float32)
        flat = scores.reshape(-1)
        order = sorted(range(flat.size), key=lambda i: (-flat[i], i))[: 2 * n_beams]
        nxt = []
        for rank, index in enumerate(order):
            parent, token = divmod(index, flat.size // n_beams)
            if token in eos:
                if rank >= n_beams:
                    continue
                add(beams[parent]["tokens"] + [token], flat[index], cur_len, True)
            else:
                nxt.append((parent, token, flat[index]))
            if len(nxt) == n_beams:
                break
        done = len(hyps) >= n_beams and worst >= float(flat[order[0]]) / (cur_len ** length_penalty)
        new_beams = []
        for parent, token, score in nxt:
            b = beams[parent]
            new_beams.append({"tokens": b["tokens"] + [token], "score": score, "state": b["state"], "logits": None,
                              "pending": token})
        beams = new_beams
        if done or cur_len >= max_new:
            break
        for b in beams:
            restore(ref, b["state"])
            b["logits"] = ref.step(b["pending"])
            b["state"] = snapshot(ref)
    if not done:
        for b in beams:
            add(b["tokens"], b["score"], len(b["tokens"]), False)
    best = max(hyps, key=lambda h: h[0])
    return best[1], best[0], best[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", default=os.path.join(os.environ.get("KVLM_TEST_DATA", os.path.join(ROOT, "..", "shared", "models")),
                                                       "stories260K", "stories260K.gguf"))
    parser.add_argument("--smollm2-gguf", default=os.path.join(ROOT, "models", "cache", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "beam_reference.json"))
    args = parser.parse_args()
    out = {"source": "tools/reference/make_beam_reference.py (float64 NumPy forward, HF transformers 4.46.3 beam "
                     "search semantics)", "models": {}}
    ref = LlamaReference(args.gguf)
    story = [1] + ref.greedy([1], 24)  # a natural prompt: BOS and the model's own first 24 tokens
    cases = []
    for prompt, n_beams, lp, max_new in [([1], 2, 1.0, 40), ([1], 4, 1.0, 40), (story[:7], 3, 1.0, 48),
                                         (story, 4, 2.0, 60), (story, 5, -1.0, 120), (story[:12], 8, 0.5, 150)]:
        cases.append(run_case(ref, prompt, n_beams, lp, max_new, STORIES_EOS))
    out["models"]["stories260K"] = {"gguf": "stories260K/stories260K.gguf", "eos": list(STORIES_EOS), "cases": cases}
    # SmolLM2 chat answers end with <|im_end|>: hypotheses closed by an end token. Prompt ids from
    # tests/data/smollm2_reference.json (rendered and tokenized there with jinja2 and HF tokenizers).
    if os.path.exists(args.smollm2_gguf):
        chats = json.load(open(os.path.join(ROOT, "tests", "data", "smollm2_reference.json")))["cases"]
        ref = LlamaReference(args.smollm2_gguf)
        cases = [run_case(ref, chats[0]["prompt_ids"], 3, 1.0, 24, SMOLLM2_EOS),
                 run_case(ref, chats[3]["prompt_ids"], 2, 1.0, 32, SMOLLM2_EOS)]
        out["models"]["smollm2"] = {"gguf": "models/cache/SmolLM2-135M-Instruct.Q4_1.gguf",
                                    "eos": list(SMOLLM2_EOS), "cases": cases}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


def run_case(ref, prompt, n_beams, lp, max_new, eos):
    tokens, score, ended = beam_search(ref, prompt, n_beams, lp, max_new, eos)
    print(f"beams {n_beams} lp {lp}: {len(tokens)} tokens, score {score:.5f}, ended {ended}", file=sys.stderr)
    return {"prompt_ids": [int(t) for t in prompt], "n_beams": n_beams, "length_penalty": lp,
            "max_new_tokens": max_new, "tokens": [int(t) for t in tokens], "score": score, "ended": ended}


if __name__ == "__main__":
    main()
