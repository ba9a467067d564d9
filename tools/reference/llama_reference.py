#!/usr/bin/env python3
"""Independent float64 NumPy reference of the Llama forward pass, reading weights straight from a GGUF.

Shares no code with kvlm: hyperparameters come from GGUF metadata, weights are dequantized with the
`gguf` package (Q4_1, Q8_0, F16, F32 ...), and every op (RMSNorm, RoPE, GQA attention over a KV cache,
SwiGLU, tied or separate output head) is a few lines of float64 NumPy.

RoPE convention: GGUF llama files store attn_q/attn_k rows in the original Meta order (llama.cpp's
converter undoes Hugging Face's rotate_half permutation), so within each head dimensions (2i, 2i+1) form
rotated pairs with frequency theta^(-2i/head_dim). (kvlm's own files use the rotate_half order instead,
so the two implementations meet only through the converter - which is the point.)

`--gguf M --ids a,b,... --perplexity` scores the ids as one chunk of kvlm perplexity (tests/import/
test_kquant_model.cpp holds kvlm's k-quant kernels to it).

Checked: `python3 tools/reference/llama_reference.py --self-check` on stories260K.gguf reproduces
/work/shared/models/stories260K/reference_greedy_f32.json: the 200 greedy ids from BOS are identical and
the logits of positions 0-3 agree within 1e-4 (measured max abs diff 5e-7, the JSON's 6-decimal rounding).
"""
import argparse
import json
import os
import sys

import numpy as np


def _field_value(field):
    """Scalar / string / array value of a GGUFReader field."""
    return field.contents()


class LlamaReference:
    def __init__(self, gguf_path):
        import gguf  # reference tooling only

        reader = gguf.GGUFReader(gguf_path)
        meta = {name: field for name, field in reader.fields.items()}

        def get(key, default=None):
            if key not in meta:
                if default is None:
                    raise KeyError(f"{gguf_path}: metadata key {key} missing")
                return default
            return _field_value(meta[key])

        arch = get("general.architecture")
        if arch != "llama":
            raise ValueError(f"{gguf_path}: architecture {arch!r}, expected 'llama'")
        self.n_embd = int(get("llama.embedding_length"))
        self.n_layers = int(get("llama.block_count"))
        self.n_heads = int(get("llama.attention.head_count"))
        self.n_kv_heads = int(get("llama.attention.head_count_kv", self.n_heads))
        self.n_ff = int(get("llama.feed_forward_length"))
        self.head_dim = self.n_embd // self.n_heads
        self.rope_dim = int(get("llama.rope.dimension_count", self.head_dim))
        self.rope_theta = float(get("llama.rope.freq_base", 10000.0))
        self.norm_eps = float(get("llama.attention.layer_norm_rms_epsilon"))
        assert self.rope_dim == self.head_dim, "partial rotary not supported by this reference"
        assert self.n_heads % self.n_kv_heads == 0

        self.w = {}
        for t in reader.tensors:
            # dequantize returns the logical array, outermost dim first: [out_features, in_features]
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # GGUF lists ne0 (innermost) first
            self.w[t.name] = np.asarray(a, dtype=np.float64).reshape(shape)
        self.n_vocab = self.w["token_embd.weight"].shape[0]
        # Tied classifier when the file has no output.weight.
        self.output = self.w.get("output.weight", self.w["token_embd.weight"])

        half = self.head_dim // 2
        self.inv_freq = self.rope_theta ** (-np.arange(half, dtype=np.float64) * 2.0 / self.head_dim)
        self.reset()

    def reset(self):
        self.k_cache = [[] for _ in range(self.n_layers)]  # per layer: list of [n_kv_heads, head_dim]
        self.v_cache = [[] for _ in range(self.n_layers)]
        self.pos = 0

    def _rmsnorm(self, x, weight):  # x: [n_embd]
        return x / np.sqrt(np.mean(x * x) + self.norm_eps) * weight

    def _rope(self, x, pos):  # x: [n, head_dim], interleaved pairs (2i, 2i+1)
        angle = pos * self.inv_freq
        cos, sin = np.cos(angle), np.sin(angle)
        x0, x1 = x[:, 0::2], x[:, 1::2]
        out = np.empty_like(x)
        out[:, 0::2] = x0 * cos - x1 * sin
        out[:, 1::2] = x0 * sin + x1 * cos
        return out

    def step(self, token):
        """Runs one token at the next position; returns float64 logits [n_vocab]."""
        w, hd = self.w, self.head_dim
        group = self.n_heads // self.n_kv_heads
        x = w["token_embd.weight"][token].copy()
        for l in range(self.n_layers):
            p = f"blk.{l}."
            h = self._rmsnorm(x, w[p + "attn_norm.weight"])
            q = (w[p + "attn_q.weight"] @ h).reshape(self.n_heads, hd)
            k = (w[p + "attn_k.weight"] @ h).reshape(self.n_kv_heads, hd)
            v = (w[p + "attn_v.weight"] @ h).reshape(self.n_kv_heads, hd)
            q, k = self._rope(q, self.pos), self._rope(k, self.pos)
            self.k_cache[l].append(k)
            self.v_cache[l].append(v)
            keys = np.stack(self.k_cache[l])    # [n_past, n_kv_heads, head_dim]
            values = np.stack(self.v_cache[l])  # [n_past, n_kv_heads, head_dim]
            att_out = np.empty((self.n_heads, hd))
            for head in range(self.n_heads):
                kvh = head // group
                scores = keys[:, kvh, :] @ q[head] / np.sqrt(hd)
                scores = np.exp(scores - scores.max())
                scores /= scores.sum()
                att_out[head] = scores @ values[:, kvh, :]
            x = x + w[p + "attn_output.weight"] @ att_out.reshape(-1)
            h = self._rmsnorm(x, w[p + "ffn_norm.weight"])
            gate = w[p + "ffn_gate.weight"] @ h
            up = w[p + "ffn_up.weight"] @ h
            x = x + w[p + "ffn_down.weight"] @ (gate / (1.0 + np.exp(-gate)) * up)
        self.pos += 1
        return self.output @ self._rmsnorm(x, w["output_norm.weight"])

    def greedy(self, prompt_ids, n_new, stop_ids=(), on_logits=None):
        """Feeds prompt_ids, then appends argmax tokens. Returns generated ids (a stop id is included
        and ends generation). on_logits(step, logits) sees the logits each generated token came from."""
        self.reset()
        logits = None
        for t in prompt_ids:
            logits = self.step(t)
        out = []
        for i in range(n_new):
            if on_logits:
                on_logits(i, logits)
            nxt = int(np.argmax(logits))
            out.append(nxt)
            if nxt in stop_ids or i + 1 == n_new:
                break
            logits = self.step(nxt)
        return out

    def chunk_perplexity(self, ids, bos):
        """llama-perplexity's (and kvlm perplexity's) score of one chunk: the first id replaced by BOS, the
        logits at positions n/2 .. n-2 predicting ids n/2+1 .. n-1, log-softmax in float64."""
        self.reset()
        ids = [bos] + list(ids[1:])
        n = len(ids)
        nll = []
        for pos, token in enumerate(ids[:-1]):
            logits = self.step(token)
            if pos >= n // 2:
                shifted = logits - logits.max()
                nll.append(np.log(np.exp(shifted).sum()) - shifted[ids[pos + 1]])
        return float(np.exp(np.mean(nll))), len(nll)


def self_check(models_dir):
    """stories260K.gguf vs the independent reference_greedy_f32.json."""
    ref = json.load(open(os.path.join(models_dir, "stories260K/reference_greedy_f32.json")))
    model = LlamaReference(os.path.join(models_dir, "stories260K/stories260K.gguf"))
    want = ref["greedy_token_ids"]
    first = []
    got = model.greedy(ref["prompt_tokens"], len(want),
                       on_logits=lambda i, lg: first.append(lg.copy()) if i < 4 else None)
    ok = got == want
    print(f"greedy ids identical over {len(want)} steps: {ok}")
    if not ok:
        bad = next(i for i in range(min(len(got), len(want))) if got[i] != want[i])
        print(f"  first mismatch at step {bad}: got {got[bad]} want {want[bad]}")
    max_diff = max(float(np.max(np.abs(first[i] - np.array(ref["logits_first_4_positions"][i]))))
                   for i in range(4))
    print(f"max |logit diff| positions 0-3: {max_diff:.3g} (limit 1e-4)")
    ok = ok and max_diff <= 1e-4
    print("SELF-CHECK", "PASSED" if ok else "FAILED")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self-check", action="store_true", help="check against stories260K reference data")
    ap.add_argument("--models", default=os.environ.get("KVLM_TEST_DATA", "/work/shared/models"))
    ap.add_argument("--gguf", help="run greedy from --ids on this GGUF")
    ap.add_argument("--ids", default="1", help="comma-separated prompt ids")
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("--perplexity", action="store_true",
                    help="print the JSON perplexity of --ids as one chunk (its first id replaced by --bos)")
    ap.add_argument("--bos", type=int, default=1)
    args = ap.parse_args()
    if args.self_check:
        sys.exit(0 if self_check(args.models) else 1)
    if args.gguf:
        model = LlamaReference(args.gguf)
        if args.perplexity:
            ppl, n_scored = model.chunk_perplexity([int(t) for t in args.ids.split(",")], args.bos)
            print(json.dumps({"ppl": ppl, "tokens_scored": n_scored}))
            return
        print(model.greedy([int(t) for t in args.ids.split(",")], args.n))
        return
    ap.print_help()


if __name__ == "__main__":
    main()
