#!/usr/bin/env python3
"""Config-key mutations for tests/probe/config_keys.sh (a function of the seed and the trial number).

usage: config_keys.py hf SEED TRIAL CONFIG_IN CONFIG_OUT   one to three keys that change the computation set in
                                                            config.json; prints "refuse KEY" (kvlm must refuse
                                                            naming KEY, one of those it changed) or "ok" (every
                                                            value set is the key's no-op)
       config_keys.py gguf SEED TRIAL                       flags for bench/export_gguf.py, then "refuse NAME" or
                                                            "ok", on two lines
"""
import json
import random
import sys

# key -> (values kvlm must refuse, values that change nothing)
HF_KEYS = {
    "sliding_window": ([4096, 256, 32], [None]),
    "use_sliding_window": ([True], [False, None]),
    "layer_types": ([["sliding_attention"] * 5, ["full_attention", "sliding_attention"] * 3], [[], None]),
    "partial_rotary_factor": ([0.5, 0.25], [1.0, None]),
    "quantization_config": ([{"quant_method": "gptq", "bits": 4}, {"quant_method": "awq"}], [None]),
    "hidden_act": ([["silu"], "gelu", "gelu_pytorch_tanh", "relu"], ["silu"]),
    "attn_logit_softcapping": ([50.0], [None]),
    "final_logit_softcapping": ([30.0], [None]),
    "use_qk_norm": ([True], [False]),
    "no_rope_layers": ([[1, 0, 1, 1, 1]], [[1, 1, 1, 1, 1], None]),
    "query_pre_attn_scalar": ([256, 64], [None]),
    "num_local_experts": ([8], [None, 0, 1]),
    "embedding_multiplier": ([12.0], [1.0, None]),
    "tie_word_embeddings": ([False], [True]),  # the checkpoint has no lm_head.weight
    "mlp_bias": ([True], [False]),
    "attention_bias": ([True], [False]),
}

GGUF_KEYS = [
    (["--set", "llama.rope.scaling.factor=f32:4"], "llama.rope.scaling.factor"),
    (["--set", "llama.rope.scaling.factor=f32:1"], None),
    (["--set", "llama.rope.scale_linear=f32:2"], "llama.rope.scale_linear"),
    (["--set", "llama.expert_count=u32:8"], "llama.expert_count"),
    (["--set", "llama.expert_count=u32:0"], None),
    (["--set", "llama.expert_used_count=u32:2"], "llama.expert_used_count"),
    (["--set", "llama.attention.clamp_kqv=f32:8"], "llama.attention.clamp_kqv"),
    (["--set", "llama.logit_scale=f32:0.5"], "llama.logit_scale"),
    (["--set", "llama.attention.layer_norm_epsilon=f32:0.00001"], "llama.attention.layer_norm_epsilon"),
    (["--set", "llama.attention.sliding_window=u32:64"], "llama.attention.sliding_window"),
    (["--set", "general.description=string:a-model"], None),
    (["--add-tensor", "blk.0.attn_q.bias:64"], "blk.0.attn_q.bias"),
    (["--add-tensor", "blk.4.attn_output.bias:64"], "blk.4.attn_output.bias"),
    (["--add-tensor", "blk.2.attn_q_norm.weight:8"], "blk.2.attn_q_norm.weight"),
    (["--add-tensor", "blk.1.attn_k_norm.weight:8"], "blk.1.attn_k_norm.weight"),
    (["--add-tensor", "blk.0.ffn_gate_inp.weight:64"], "blk.0.ffn_gate_inp.weight"),
]


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    kind, seed, trial = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed * 1000003 + trial)
    if kind == "gguf":
        flags, refused = rng.choice(GGUF_KEYS)
        print(" ".join(flags))
        print(f"refuse {refused}" if refused else "ok")
        return
    config = json.load(open(sys.argv[4]))
    refused = []
    for key in rng.sample(sorted(HF_KEYS), rng.randint(1, 3)):
        bad, harmless = HF_KEYS[key]
        if rng.random() < 0.7:
            config[key] = rng.choice(bad)
            refused.append(key)
        else:
            config[key] = rng.choice(harmless)
    json.dump(config, open(sys.argv[5], "w"), indent=2)
    print("refuse " + " ".join(refused) if refused else "ok")


if __name__ == "__main__":
    main()
